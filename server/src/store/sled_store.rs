//! The embedded store on sled 0.34.
//!
//! Layout: one sled tree, keys prefixed by a tag byte, then the kind and the
//! tenant, so every scan is confined to one tenant:
//!
//! | tag | key                                              | value        |
//! |-----|--------------------------------------------------|--------------|
//! | `r` | kind, tenant, id                                 | record JSON  |
//! | `o` | kind, tenant, scope, sort, timestamp µs, id      | –            |
//! | `m` | kind, tenant, scope, hash(key=value), sort, ts, id | –          |
//! | `f` | kind, tenant, referenced id, id                  | –            |
//! | `u` | kind, tenant, scope, unique name                 | id           |
//!
//! The `m` hash is of the value's canonical form ([`super::filter`]), so
//! values a filter finds equal (`1` and `1.0`) share a key; a store written
//! before that is upgraded at open ([`upgrade`]).
//!
//! Writes go through one writer thread with group commit: it drains every
//! queued commit, checks each against the store as the group's earlier
//! commits leave it (their writes held in memory until applied), applies the
//! group's writes as one atomic `Batch` (a failing commit adds nothing and
//! never fails its neighbours; readers never see half of one; sled writes its
//! log for every batch, so one batch per group rather than one per commit
//! more than doubles the writes per second), then makes the whole group
//! durable with one `flush()` (plus an `fdatasync` when configured) before
//! answering any of them. `flush_async` is never used: it
//! deadlocks sled 0.34.7 under concurrency (sled#1308).
//!
//! Here: the handle ([`SledStore`]), what it shares with its threads, and
//! the [`Store`] impl. Beside it: `keys` (the layout), `batch` (one commit's
//! writes after its group's earlier ones, and its undo), `writer` (group commit and failed groups),
//! `purge` (deleted scopes, removed in steps) and `upgrade` (index formats
//! rewritten at open).
//!
//! Keys starting with byte 0 are reserved for the store's identity and commit
//! sequence ([`super::manifest`]); what opening checks is in [`super::open`].
//!
//! When the disk fails (full, or any IO error) the store never hangs and never
//! keeps a write it answered with an error:
//!
//! - Writes stop (507) while the disk has less than a reserve free
//!   ([`StoreLimits::min_free_bytes`], checked once per group): refused before
//!   sled sees them, they are certainly not stored, and sled practically never
//!   runs out in the middle of a write, which it handles badly (below).
//! - Building a commit's batch also records how to undo it (the keys it
//!   writes, the old rows it replaces: read anyway, so it costs no extra
//!   read). When a group's flush fails, every commit of the group is answered
//!   with the error and the group is undone, in memory if sled still accepts
//!   writes, else on disk after reopening sled (an undo is idempotent).
//! - sled 0.34.7 keeps its first IO error for good (`global_error`: every later
//!   write and flush fails, so does reading a page not in the cache), and a
//!   `flush()` that started before the error may wait forever on a condition
//!   variable nobody signals. So: a watchdog wakes a flush stuck for a second
//!   (a second `flush()` sees the error and signals), and recovery reopens
//!   sled in-process: the writer drops its handle, readers get the new one
//!   ([`SledStore`] holds the current handle behind a lock).
//! - sled can also wedge: a large value whose blob file cannot be written
//!   leaves its log buffer unfinished for good, with no error recorded, so
//!   every flush waits forever and no handle can close (its file lock stays).
//!   Nothing in-process can recover that: the process exits (code 75) with a
//!   message for its supervisor, once a flush has been stuck for twice the
//!   write timeout or a reopen has waited 10 s for the old handle. Commits of
//!   such a group are answered "may or may not have been saved".
//! - While the store cannot write, commits answer [`StoreError::Full`] or
//!   [`StoreError::Unavailable`] at once; the writer probes the disk once a
//!   second and resumes by itself. [`Store::health`] says why it cannot write.
//! - A commit waits at most the write timeout (`store_timeout_s`); a commit
//!   whose waiter gave up is never applied afterwards. [`SledStore::close`]
//!   waits for the writer a bounded time, so a dead disk cannot hold a
//!   shutdown hostage.

mod purge;

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sled::IVec;
use uuid::Uuid;

use super::manifest::{Checkpointer, PointFile, Sequence};
use super::open::{OpenError, Opened, held_by_another, open_checked, quietly};
use super::{
    Direction, DocLayout, DocParts, Expect, Kind, ListQuery, Op, Record, SortBy, Store, StoreError,
    StoreResult,
};
use crate::metadata::{canonical, metadata_matches};

mod batch;
mod doc_view;
mod keys;
mod upgrade;
mod writer;

use batch::*;
use doc_view::DocView;
use keys::*;
use writer::*;

const SORTS: [SortBy; 2] = [SortBy::CreatedAt, SortBy::UpdatedAt];
/// How many commits one group may take before it is flushed.
const MAX_GROUP: usize = 512;
/// How many bytes of a group's writes wait before they are applied as one
/// sled batch (and the next commits read them from sled).
const MAX_BATCH_BYTES: u64 = 4 << 20;
/// The default bound on a commit's wait (`[server] store_timeout_s`).
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds the store keeps to, so that a failing disk never hangs a request.
#[derive(Clone, Copy, Debug)]
pub struct StoreLimits {
    /// How long a commit may wait for the writer before it answers
    /// [`StoreError::Unavailable`] (and how long a flush may take before the
    /// store counts as unavailable).
    pub write_timeout: Duration,
    /// Writes stop ([`StoreError::Full`]) while the store's disk has less than
    /// this free, so that sled, which recovers badly from running out in the
    /// middle of a write (see the module docs), practically never does.
    pub min_free_bytes: u64,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits { write_timeout: DEFAULT_WRITE_TIMEOUT, min_free_bytes: DEFAULT_MIN_FREE_BYTES }
    }
}
/// How often a failing store tries to recover.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// A flush taking longer than this is woken by the watchdog (see the module docs).
const KICK_AFTER: Duration = Duration::from_secs(1);
/// How long [`SledStore::close`] waits for the writer to finish.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// The default of [`StoreLimits::min_free_bytes`].
pub const DEFAULT_MIN_FREE_BYTES: u64 = 16 << 20;
/// A commit is taken to need this many times its batch's bytes on disk (log, blobs, page rewrites).
const SPACE_PER_BYTE: u64 = 2;
/// How long a reopen may wait for sled's old handle to let go of its file lock.
const REOPEN_GIVE_UP: Duration = Duration::from_secs(10);
/// Written, synced and removed to learn whether the disk takes writes again.
const PROBE_FILE: &str = "write-probe.tmp";
const PROBE_BYTES: usize = 1 << 20;

/// How hard a commit is pushed to disk before it is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// sled's `flush()`: the data is in the OS; survives the process being killed.
    Flush,
    /// `flush()` then `fdatasync` of the data file: also survives power loss.
    #[default]
    Fsync,
}

/// Who decides a job's fate: the writer (taking it) or its waiter (giving up).
const PENDING: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

struct Job {
    tenant: Uuid,
    ops: Vec<Op>,
    /// [`PENDING`] until the writer takes it or the waiter abandons it.
    state: Arc<AtomicU8>,
    deadline: Instant,
    reply: tokio::sync::oneshot::Sender<StoreResult<()>>,
    /// A step of the purger (then `ops` is empty).
    purge: Option<purge::Step>,
}

impl Job {
    /// Claims the job for the writer; false if its waiter gave up (or is past its deadline).
    fn take(&self) -> bool {
        if Instant::now() >= self.deadline {
            let _ = self.state.compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire);
        }
        self.state.compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// Counters of the writer: how well group commit is grouping.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub groups: AtomicU64,
    pub commits: AtomicU64,
}

/// What the handle, the writer and the watchdog share.
struct Shared {
    dir: PathBuf,
    /// sled's page cache ([`OpenOptions::cache_bytes`]), for reopening.
    cache_bytes: u64,
    /// The current sled handle; `None` while the writer reopens it.
    db: RwLock<Option<sled::Db>>,
    /// Set (with `failure`) while the store cannot write: the fast check.
    failing: AtomicBool,
    failure: Mutex<Option<StoreError>>,
    /// When the writer started its current flush (ms since `epoch`, +1), or 0.
    flushing_since: AtomicU64,
    epoch: Instant,
    write_timeout_ms: AtomicU64,
    min_free_bytes: AtomicU64,
    closing: AtomicBool,
    /// Wakes the waiters of commits when the store closes.
    closed: tokio::sync::Notify,
    stats: WriterStats,
    /// The writer's queue; `None` once the store is closing.
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    /// Scopes deleted whose records the purger has yet to remove: reads hide them.
    purging: purge::Purging,
    /// Wakes the purger.
    purge_wake: mpsc::Sender<()>,
    #[cfg(test)]
    fail_next_flush: AtomicBool,
    #[cfg(test)]
    purger_paused: AtomicBool,
}

impl Shared {
    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms.load(Ordering::Relaxed))
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// How long the writer has been inside its current flush.
    fn flushing_for(&self) -> Option<Duration> {
        match self.flushing_since.load(Ordering::Acquire) {
            0 => None,
            since => Some(Duration::from_millis(self.now_ms().saturating_sub(since))),
        }
    }

    fn health(&self) -> StoreResult<()> {
        if self.failing.load(Ordering::Acquire)
            && let Some(e) = self.failure.lock().expect("failure lock").clone()
        {
            return Err(e);
        }
        if let Some(d) = self.flushing_for()
            && d > self.write_timeout()
        {
            return Err(StoreError::Unavailable(format!(
                "the disk holding the store ({}) has not completed a write for {} s; check the disk \
                 and the server log; writes resume by themselves once it answers",
                self.dir.display(),
                d.as_secs()
            )));
        }
        if self.closing.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable(
                "the server is shutting down; retry on its next start".into(),
            ));
        }
        Ok(())
    }

    fn set_failure(&self, e: StoreError) {
        *self.failure.lock().expect("failure lock") = Some(e);
        self.failing.store(true, Ordering::Release);
    }

    fn clear_failure(&self) {
        self.failing.store(false, Ordering::Release);
        *self.failure.lock().expect("failure lock") = None;
    }

    /// The current handle, for a read.
    fn db(&self) -> StoreResult<sled::Db> {
        if let Some(db) = self.db.read().expect("db lock").as_ref() {
            return Ok(db.clone());
        }
        Err(StoreError::Unavailable(match self.failure.lock().expect("failure lock").as_ref() {
            Some(e) => format!("the store is being reopened after a failed write: {e}"),
            None => "the store is being reopened; retry in a second".into(),
        }))
    }

    /// A sled error met by a read: the store may read again later, it is never the caller's fault.
    fn read_error(&self, e: sled::Error) -> StoreError {
        StoreError::Unavailable(format!(
            "the store in {} cannot read now ({e}); it recovers by itself once its disk can write",
            self.dir.display()
        ))
    }

    /// A sled (or file) error met by a write, classified: a full disk, or another failure.
    fn write_error(&self, e: &dyn std::fmt::Display, kind: Option<std::io::ErrorKind>) -> StoreError {
        use std::io::ErrorKind::{QuotaExceeded, StorageFull};
        let dir = self.dir.display();
        if matches!(kind, Some(StorageFull | QuotaExceeded)) {
            StoreError::Full(format!(
                "the disk holding the store is full: free space in {dir}; writes resume by themselves ({e})"
            ))
        } else {
            StoreError::Unavailable(format!(
                "the store in {dir} cannot write ({e}); check the disk and the server log; writes \
                 resume by themselves once it can"
            ))
        }
    }

    fn low_space_error(&self) -> StoreError {
        StoreError::Full(format!(
            "the disk holding the store is full: free space in {} (writes stop while less than {} MiB \
             is free, so that the store never runs out in the middle of a write); writes resume by \
             themselves",
            self.dir.display(),
            self.min_free_bytes.load(Ordering::Relaxed) >> 20
        ))
    }

    fn sled_write_error(&self, e: sled::Error) -> StoreError {
        let kind = match &e {
            sled::Error::Io(io) => Some(io.kind()),
            _ => None,
        };
        self.write_error(&e, kind)
    }

    fn io_write_error(&self, e: std::io::Error) -> StoreError {
        self.write_error(&e, Some(e.kind()))
    }
}

pub struct SledStore {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    purger: Mutex<Option<JoinHandle<()>>>,
    opened: Opened,
    sequence: Arc<Sequence>,
    /// Where the writer, and the close, record each durable point.
    point: Arc<PointFile>,
    /// Declared after `shared` on purpose: fields drop in order, so its drop (the
    /// clean-stop manifest, with the `db` file's fingerprint) runs once sled has
    /// closed its files and will not change them again.
    checkpointer: Mutex<CleanStop>,
}

/// The checkpointer, and whether the close flushed everything (then, and only
/// then, the manifest records a clean stop when the store is dropped).
struct CleanStop {
    checkpointer: Checkpointer,
    flushed: bool,
}

impl Drop for CleanStop {
    fn drop(&mut self) {
        if self.flushed {
            refresh_snapshot(self.checkpointer.dir());
            // If this fails the manifest keeps its last checkpoint, without a
            // clean stop: the next open still checks the sequence.
            let _ = self.checkpointer.write_clean_stop();
        }
    }
}

/// sled writes the snapshot of its page table only when it opens, so an open
/// replays all the log written since the previous open (over a second after a
/// million writes). Opening the closed store once more moves that work to the
/// clean stop, and the next start reads a fresh snapshot. Threads that held
/// the store (its watchdog, sled's own) may keep sled's file lock a moment
/// after the store is dropped: it tries for up to a second. Does nothing when
/// the db still cannot be opened: the next start replays the log, as it would.
fn refresh_snapshot(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let opened = quietly(|| sled::Config::new().path(dir).cache_capacity(8 << 20).open());
        match opened {
            Ok(Err(e)) if held_by_another(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => return,
        }
    }
}

/// How to open the store.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub durability: Durability,
    /// Open a store that lost data or is damaged (as far as sled can read it)
    /// and take what it holds as the new checkpoint. A one-time decision.
    pub accept_data_loss: bool,
    /// The most memory sled's page cache takes ([`DEFAULT_CACHE_BYTES`]).
    pub cache_bytes: u64,
}

/// sled's page cache, by default: a fraction of sled's own default (1 GiB),
/// which lists and reads of recent records fit in; the rest is read from
/// the OS's page cache.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

impl OpenOptions {
    pub fn new(durability: Durability) -> Self {
        OpenOptions { durability, accept_data_loss: false, cache_bytes: DEFAULT_CACHE_BYTES }
    }
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Opens sled in `dir` (the store's open and the writer's reopen).
fn open_db(dir: &Path, cache_bytes: u64) -> StoreResult<sled::Db> {
    sled::Config::new()
        .path(dir)
        .cache_capacity(cache_bytes)
        .flush_every_ms(Some(500))
        .open()
        .map_err(|e| io(format!("cannot open the store in {}: {e}", dir.display())))
}

impl SledStore {
    /// Opens (or creates) the store in `dir`, refusing one that lost data (see
    /// [`SledStore::open_with`]).
    pub fn open(dir: &Path, durability: Durability) -> StoreResult<Self> {
        Self::open_with(dir, OpenOptions::new(durability)).map_err(io)
    }

    /// Opens the store in `dir`: creates it when the dir holds nothing of ours,
    /// refuses it when it is in use, lost data or is corrupt (see [`super::open`]).
    pub fn open_with(dir: &Path, options: OpenOptions) -> Result<Self, OpenError> {
        let durability = options.durability;
        let (db, opened, point) = open_checked(dir, options.accept_data_loss, options.cache_bytes)?;
        let point = Arc::new(point);
        upgrade::to_current(&db, dir, &opened, options.accept_data_loss)?;
        let fail = |e: std::io::Error| OpenError::Io { dir: dir.to_path_buf(), what: e.to_string() };
        let sequence = Sequence::starting_at(opened.sequence);
        let checkpointer =
            Checkpointer::start(dir, opened.store_id, sequence.clone(), opened.sequence).map_err(fail)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let (purge_wake, woken) = mpsc::channel();
        let purging = purge::Purging::default();
        let unfinished =
            purging.load(&db).map_err(|e| OpenError::Io { dir: dir.to_path_buf(), what: e.to_string() })?;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            cache_bytes: options.cache_bytes,
            db: RwLock::new(Some(db.clone())),
            failing: AtomicBool::new(false),
            failure: Mutex::new(None),
            flushing_since: AtomicU64::new(0),
            epoch: Instant::now(),
            write_timeout_ms: AtomicU64::new(DEFAULT_WRITE_TIMEOUT.as_millis() as u64),
            min_free_bytes: AtomicU64::new(DEFAULT_MIN_FREE_BYTES),
            closing: AtomicBool::new(false),
            closed: tokio::sync::Notify::new(),
            stats: WriterStats::default(),
            queue: Mutex::new(Some(tx)),
            purging,
            purge_wake,
            #[cfg(test)]
            fail_next_flush: AtomicBool::new(false),
            #[cfg(test)]
            purger_paused: AtomicBool::new(false),
        });
        let mut writer = Writer {
            shared: shared.clone(),
            db: Some(db),
            rx,
            durability,
            sync_file: None,
            recovery: None,
            sequence: sequence.clone(),
            point: point.clone(),
        };
        writer.sync_file = writer.open_sync_file().map_err(fail)?;
        let writer = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run())
            .map_err(fail)?;
        let watched = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("store-watchdog".into())
            .spawn(move || watchdog(watched))
            .map_err(fail)?;
        let watched = Arc::downgrade(&shared);
        let purger = std::thread::Builder::new()
            .name("store-purger".into())
            .spawn(move || purge::run(watched, woken))
            .map_err(fail)?;
        if unfinished > 0 {
            // Deletes a previous run had not finished: carry on with them now.
            let _ = shared.purge_wake.send(());
        }
        Ok(SledStore {
            shared,
            writer: Mutex::new(Some(writer)),
            purger: Mutex::new(Some(purger)),
            opened,
            sequence,
            point,
            checkpointer: Mutex::new(CleanStop { checkpointer, flushed: false }),
        })
    }

    /// What the open found: the store id, its commit sequence then, and how it opened.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// Sets the store's [`StoreLimits`] (by default [`StoreLimits::default`]).
    pub fn with_limits(self, limits: StoreLimits) -> Self {
        let ms = limits.write_timeout.as_millis().clamp(1, u64::MAX as u128) as u64;
        self.shared.write_timeout_ms.store(ms, Ordering::Relaxed);
        self.shared.min_free_bytes.store(limits.min_free_bytes, Ordering::Relaxed);
        self
    }

    /// (groups flushed, commits applied) since the store was opened.
    pub fn writer_stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.shared.stats.groups.load(Relaxed), self.shared.stats.commits.load(Relaxed))
    }

    /// Stops the writer after it has finished what is queued, and flushes.
    /// Waits at most a few seconds for a writer stuck on a dead disk; then
    /// returns false (the store was not closed cleanly: the process should
    /// exit, the next start recovers from sled's log).
    pub fn close(&self) -> bool {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.closed.notify_waiters();
        self.shared.queue.lock().expect("queue lock").take();
        let Some(h) = self.writer.lock().expect("writer lock").take() else { return true };
        let mut clean = self.checkpointer.lock().expect("checkpointer lock");
        clean.checkpointer.stop();
        let deadline = Instant::now() + CLOSE_WAIT;
        while !h.is_finished() {
            if Instant::now() >= deadline {
                eprintln!(
                    "the store in {} was not closed cleanly: its writer did not finish within {} s \
                     (the disk does not answer); the next start recovers from its log",
                    self.shared.dir.display(),
                    CLOSE_WAIT.as_secs()
                );
                return false;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
        let _ = h.join();
        // The purger holds the store only while building a step: it sees the
        // store closing before its next one (and sled must be closed by the time
        // the clean stop is recorded, so nobody may hold it after this).
        if let Some(p) = self.purger.lock().expect("purger lock").take() {
            let _ = self.shared.purge_wake.send(());
            while !p.is_finished() && Instant::now() < deadline {
                std::thread::park_timeout(Duration::from_millis(10));
            }
            if !p.is_finished() {
                return false;
            }
            let _ = p.join();
        }
        // Only a store whose writer finished and whose last flush went through
        // records a clean stop (when it is dropped, after sled closed its files).
        if !self.shared.failing.load(Ordering::Acquire)
            && let Ok(db) = self.shared.db()
            && {
                self.sequence.stage(&db);
                db.flush().is_ok()
            }
        {
            self.sequence.all_flushed();
            let _ = self.point.record(self.sequence.durable(), true);
            clean.flushed = true;
        }
        true
    }

    fn record(&self, db: &sled::Db, key: &[u8]) -> StoreResult<Option<Record>> {
        match db.get(key).map_err(|e| self.shared.read_error(e))? {
            Some(v) => Ok(Some(decode(&v)?)),
            None => Ok(None),
        }
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn decode(bytes: &[u8]) -> StoreResult<Record> {
    serde_json::from_slice(bytes).map_err(|e| io(format!("corrupt record: {e}")))
}

#[async_trait]
impl Store for SledStore {
    async fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>> {
        let rec = self.record(&self.shared.db()?, &row_key(kind, tenant, id))?;
        Ok(rec.filter(|r| !self.shared.purging.hides(kind, tenant, r.scope)))
    }

    async fn doc_parts(
        &self,
        tenant: Uuid,
        id: Uuid,
        indexes: &[usize],
        layout: &DocLayout,
    ) -> StoreResult<Option<DocParts>> {
        let db = self.shared.db()?;
        let Some(bytes) = db.get(row_key(Kind::Doc, tenant, id)).map_err(|e| self.shared.read_error(e))?
        else {
            return Ok(None);
        };
        let doc = DocView::read(&bytes, layout).map_err(|e| io(format!("corrupt record: {e}")))?;
        if self.shared.purging.hides(Kind::Doc, tenant, doc.scope) {
            return Ok(None);
        }
        let snippet = |i: usize| {
            doc.snippets
                .get(i)
                .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
                .unwrap_or_default()
        };
        Ok(Some(DocParts {
            title: doc.title.unwrap_or_default(),
            metadata: doc.metadata,
            snippets: indexes.iter().map(|&i| snippet(i)).collect(),
        }))
    }

    async fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>> {
        if self.shared.purging.hides(kind, tenant, scope) {
            return Ok(Vec::new());
        }
        let filter = q.metadata_filter.as_ref().filter(|f| !f.is_empty());
        let prefix = match filter.and_then(|f| f.iter().next()) {
            Some((k, v)) => meta_prefix(kind, tenant, scope, meta_hash(k, v), q.sort_by),
            None => {
                let mut p = scope_prefix(b'o', kind, tenant, scope);
                p.push(sort_byte(q.sort_by));
                p
            }
        };
        let db = self.shared.db()?;
        let iter = match q.after {
            None => db.scan_prefix(&prefix),
            // The keys after the cursor's (in the page's order) and within the prefix:
            // every key under it is the prefix, a time and an id.
            Some((at, id)) => {
                let cursor = positioned(prefix.clone(), at, id);
                match q.direction {
                    Direction::Asc => db.range((Bound::Excluded(cursor), prefix_end(&prefix))),
                    Direction::Desc => db.range(prefix.clone()..cursor),
                }
            }
        }
        .keys();
        let iter: Box<dyn Iterator<Item = sled::Result<sled::IVec>>> = match q.direction {
            Direction::Asc => Box::new(iter),
            Direction::Desc => Box::new(iter.rev()),
        };
        let mut out = Vec::with_capacity(q.limit.min(1024));
        let mut skipped = 0usize;
        // The stored JSON of the records taken: a close (slightly high)
        // estimate of their size in the answer, known without serialising.
        let mut bytes = 0usize;
        for key in iter {
            if out.len() >= q.limit {
                break;
            }
            let id = id_suffix(&key.map_err(|e| self.shared.read_error(e))?);
            if filter.is_none() && skipped < q.offset {
                skipped += 1;
                continue;
            }
            let Some(raw) = db.get(row_key(kind, tenant, id)).map_err(|e| self.shared.read_error(e))? else {
                continue;
            };
            let r = decode(&raw)?;
            if let Some(f) = filter {
                if !metadata_matches(f, r.metadata.as_ref()) {
                    continue;
                }
                if skipped < q.offset {
                    skipped += 1;
                    continue;
                }
            }
            bytes += raw.len() + 1;
            if q.max_bytes.is_some_and(|max| bytes > max) && !out.is_empty() {
                break;
            }
            out.push(r);
        }
        Ok(out)
    }

    async fn referencing(&self, tenant: Uuid, kind: Kind, target: Uuid) -> StoreResult<Vec<Uuid>> {
        let db = self.shared.db()?;
        let ids: Vec<Uuid> = db
            .scan_prefix(ref_prefix(kind, tenant, target))
            .keys()
            .map(|k| k.map(|k| id_suffix(&k)).map_err(|e| self.shared.read_error(e)))
            .collect::<StoreResult<_>>()?;
        if !self.shared.purging.hides_any_of(kind) {
            return Ok(ids);
        }
        let mut shown = Vec::with_capacity(ids.len());
        for id in ids {
            if self.get(tenant, kind, id).await?.is_some() {
                shown.push(id);
            }
        }
        Ok(shown)
    }

    async fn lookup_unique(
        &self,
        tenant: Uuid,
        kind: Kind,
        scope: Uuid,
        name: &str,
    ) -> StoreResult<Option<Uuid>> {
        if self.shared.purging.hides(kind, tenant, scope) {
            return Ok(None);
        }
        Ok(self
            .shared
            .db()?
            .get(unique_key(kind, tenant, scope, name))
            .map_err(|e| self.shared.read_error(e))?
            .and_then(|v| Uuid::from_slice(&v).ok()))
    }

    async fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
        self.shared
            .db()?
            .scan_prefix([b'r', kind as u8])
            .map(|kv| {
                let (k, v) = kv.map_err(|e| self.shared.read_error(e))?;
                let tenant = Uuid::from_slice(&k[2..18]).map_err(io)?;
                Ok((tenant, decode(&v)?))
            })
            .filter(|r| !r.as_ref().is_ok_and(|(t, r)| self.shared.purging.hides(kind, *t, r.scope)))
            .collect()
    }

    async fn scan_ids(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Uuid, Uuid)>> {
        // The creation-order keys name every record, and hold no value to read.
        let created = sort_byte(SortBy::CreatedAt);
        let mut ids = Vec::new();
        for kv in self.shared.db()?.scan_prefix([b'o', kind as u8]) {
            let (k, _) = kv.map_err(|e| self.shared.read_error(e))?;
            // tag, kind, tenant, scope, sort, timestamp, id
            if k.len() != 2 + 16 + 16 + 1 + 8 + 16 || k[34] != created {
                continue;
            }
            let tenant = Uuid::from_slice(&k[2..18]).map_err(io)?;
            let scope = Uuid::from_slice(&k[18..34]).map_err(io)?;
            if !self.shared.purging.hides(kind, tenant, scope) {
                ids.push((tenant, scope, id_suffix(&k)));
            }
        }
        Ok(ids)
    }

    async fn commit(&self, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
        // No queueing behind a disk that cannot write.
        self.shared.health()?;
        let stopped =
            || StoreError::Unavailable("the store is closed; retry on the server's next start".into());
        let timeout = self.shared.write_timeout();
        let state = Arc::new(AtomicU8::new(PENDING));
        let (reply, mut rx) = tokio::sync::oneshot::channel();
        {
            let queue = self.shared.queue.lock().expect("queue lock");
            let q = queue.as_ref().ok_or_else(stopped)?;
            let job = Job {
                tenant,
                ops,
                state: state.clone(),
                deadline: Instant::now() + timeout,
                reply,
                purge: None,
            };
            q.send(job).map_err(|_| stopped())?;
        }
        tokio::select! {
            r = &mut rx => return r.map_err(|_| stopped())?,
            _ = tokio::time::sleep(timeout) => {}
            _ = self.shared.closed.notified() => {}
        }
        // Given up: if the writer has not taken the job, it never will.
        if state.compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return Err(StoreError::Unavailable(if self.shared.closing.load(Ordering::Acquire) {
                "the server is shutting down, so the write was not saved; retry on its next start".into()
            } else {
                format!(
                    "the store did not take the write within {} s, so it was not saved; retry later",
                    timeout.as_secs_f64()
                )
            }));
        }
        rx.close();
        if let Ok(r) = rx.try_recv() {
            return r;
        }
        Err(StoreError::Unavailable(format!(
            "the store's disk did not confirm the write within {} s: it may or may not have been saved; \
             retry it with the same Idempotency-Key",
            timeout.as_secs_f64()
        )))
    }

    async fn health(&self) -> StoreResult<()> {
        self.shared.health()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_page_stops_adding_records_past_max_bytes_but_always_has_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let (tenant, scope) = (Uuid::now_v7(), Uuid::nil());
        for i in 0..3 {
            let rec = Record::fresh(
                Kind::Agent,
                scope,
                json!({"name": format!("a{i}"), "about": "x".repeat(1000)}),
            );
            store.commit(tenant, vec![Op::Put { record: rec, expect: Expect::Absent }]).await.unwrap();
        }
        let page = async |max_bytes| {
            let q = ListQuery { limit: 100, max_bytes, ..Default::default() };
            store.list(tenant, Kind::Agent, scope, &q).await.unwrap().len()
        };
        assert_eq!(page(None).await, 3);
        assert_eq!(page(Some(1)).await, 1, "a page always has one record");
        assert_eq!(page(Some(3000)).await, 2, "two records of ~1.3 KB fit 3,000 bytes, three do not");
        assert_eq!(page(Some(1 << 20)).await, 3);
    }

    /// The newest of sled's snapshots in `dir`, by the log position it covers
    /// (0: none; sled writes one when an open finds log past the last one).
    fn newest_snapshot(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok()
            })
            .max()
            .unwrap_or(0)
    }

    /// A clean stop leaves a snapshot of sled's page table that covers the
    /// writes made since the open, so the next start replays none of them.
    #[tokio::test]
    async fn a_clean_stop_leaves_a_snapshot_covering_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let at_open = newest_snapshot(dir.path());
        let tenant = Uuid::now_v7();
        for i in 0..200 {
            let rec = Record::fresh(Kind::Agent, tenant, json!({"name": format!("a{i}")}));
            store.commit(tenant, vec![Op::Put { record: rec, expect: Expect::Absent }]).await.unwrap();
        }
        assert_eq!(newest_snapshot(dir.path()), at_open, "sled snapshots only when it opens");
        assert!(store.close());
        drop(store);
        let at_stop = newest_snapshot(dir.path());
        assert!(
            at_stop > at_open,
            "the stop's snapshot (log position {at_stop}) is past the open's ({at_open})"
        );
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        assert_eq!(store.opened().origin, crate::store::open::Origin::Reopened { last_stop_clean: true });
        assert_eq!(newest_snapshot(dir.path()), at_stop, "the next open had no log to replay");
    }

    /// The parts of a doc read without decoding it all are those of the
    /// whole record: title, metadata, snippets asked for (in their order, ""
    /// past the end); a doc that is not there (or another tenant's) is None.
    #[tokio::test]
    async fn a_docs_parts_are_those_of_its_whole_record() {
        use crate::app::docs::DOC_LAYOUT;
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let (tenant, owner) = (Uuid::now_v7(), Uuid::now_v7());
        let mut doc = Record::fresh(
            Kind::Doc,
            owner,
            json!({"title": "Tea", "content": ["green \"tea\" é", "black", "oolong"], "owner_role": "agent"}),
        );
        doc.metadata = json!({"topic": "tea", "n": 3}).as_object().cloned();
        let id = doc.id;
        store.commit(tenant, vec![Op::Put { record: doc, expect: Expect::Absent }]).await.unwrap();
        let whole = store.get(tenant, Kind::Doc, id).await.unwrap().unwrap();
        for indexes in [vec![], vec![0], vec![2, 0], vec![1, 7]] {
            let parts = store.doc_parts(tenant, id, &indexes, &DOC_LAYOUT).await.unwrap().unwrap();
            assert_eq!(parts, DocParts::of(&whole, &indexes, &DOC_LAYOUT), "{indexes:?}");
        }
        let parts = store.doc_parts(tenant, id, &[0], &DOC_LAYOUT).await.unwrap().unwrap();
        assert_eq!(parts.snippets, ["green \"tea\" é"]);
        assert_eq!(store.doc_parts(Uuid::now_v7(), id, &[0], &DOC_LAYOUT).await.unwrap(), None);
        assert_eq!(store.doc_parts(tenant, Uuid::now_v7(), &[0], &DOC_LAYOUT).await.unwrap(), None);
    }

    fn dump(store: &SledStore) -> Vec<(IVec, IVec)> {
        store.shared.db().unwrap().iter().map(|kv| kv.unwrap()).collect()
    }

    fn agent(tenant: Uuid, name: &str, meta: Value) -> Record {
        let mut r = Record::fresh(Kind::Agent, tenant, json!({ "name": name }));
        r.unique = Some(name.into());
        r.metadata = meta.as_object().cloned();
        r
    }

    /// A failed flush (injected: sled gives no way to fail one on demand)
    /// answers the commit with the error and leaves every key as it was, in
    /// the running store and after a reopen; the next commit goes through.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_whose_flush_fails_is_answered_with_the_error_and_undone() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = Uuid::now_v7();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let a = agent(tenant, "a", json!({"k": 1}));
        let gone = agent(tenant, "gone", json!({"k": 2}));
        let ops = vec![
            Op::Put { record: a.clone(), expect: Expect::Absent },
            Op::Put { record: gone.clone(), expect: Expect::Absent },
        ];
        store.commit(tenant, ops).await.unwrap();
        let before = dump(&store);

        // Replaces one record (new name, new metadata), deletes one, creates one, touches one.
        let mut a2 = store.get(tenant, Kind::Agent, a.id).await.unwrap().unwrap();
        a2.unique = Some("a2".into());
        a2.metadata = json!({"k": 3, "x": "y"}).as_object().cloned();
        let new = agent(tenant, "new", json!({}));
        let ops = vec![
            Op::Put { record: a2.clone(), expect: Expect::Version(0) },
            Op::Delete { kind: Kind::Agent, id: gone.id, version: None },
            Op::Put { record: new.clone(), expect: Expect::Absent },
            Op::Touch { kind: Kind::Agent, id: a.id },
        ];
        store.shared.fail_next_flush.store(true, Ordering::Release);
        let err = store.commit(tenant, ops.clone()).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert!(dump(&store) == before, "the failed commit left keys behind in the running store");
        assert_eq!(store.get(tenant, Kind::Agent, a.id).await.unwrap().unwrap().version, 0);
        assert_eq!(store.lookup_unique(tenant, Kind::Agent, tenant, "gone").await.unwrap(), Some(gone.id));
        assert!(store.get(tenant, Kind::Agent, new.id).await.unwrap().is_none());
        drop(store);

        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        assert!(dump(&store) == before, "the failed commit left keys behind on disk");
        store.health().await.unwrap();
        store.commit(tenant, ops).await.unwrap();
        assert_eq!(store.get(tenant, Kind::Agent, a.id).await.unwrap().unwrap().version, 2);
        assert!(store.get(tenant, Kind::Agent, gone.id).await.unwrap().is_none());
    }

    /// A record created in the same group as its scope's deletion, before it,
    /// is not yet in sled when the purger reads the scope (outside the writer):
    /// the purger's empty step must not finish the purge and leave it behind.
    #[tokio::test]
    async fn a_purge_is_not_finished_while_the_group_holds_records_of_its_scope() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = Uuid::now_v7();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        store.shared.purger_paused.store(true, Ordering::Release);
        let session = Record::fresh(Kind::Session, Uuid::nil(), json!({}));
        let sid = session.id;
        store.commit(tenant, vec![Op::Put { record: session, expect: Expect::Absent }]).await.unwrap();
        let db = store.shared.db().unwrap();
        let build = |pending: &mut Writes, ops: Vec<Op>, step: Option<purge::Step>| {
            build_writes(&store.shared, &db, pending, tenant, ops, step.as_ref()).map(|(writes, undo, _)| {
                pending.extend(writes);
                undo
            })
        };
        let scope = purge::Scope { kind: Kind::Message, tenant, scope: sid };
        let empty_step = || Some(purge::Step { scope, ids: Vec::new() });

        let mut pending = Writes::new();
        let m = Record::fresh(Kind::Message, sid, json!({"content": "late"}));
        let append = vec![
            Op::Require { kind: Kind::Session, id: sid },
            Op::Put { record: m.clone(), expect: Expect::Absent },
        ];
        build(&mut pending, append, None).unwrap();
        let delete = vec![
            Op::Delete { kind: Kind::Session, id: sid, version: None },
            Op::DeleteScope { kind: Kind::Message, scope: sid },
        ];
        build(&mut pending, delete, None).unwrap();
        assert!(db.scan_prefix(purge::scope_keys(scope)).next().is_none(), "the purger reads no message");
        let undo = build(&mut pending, Vec::new(), empty_step()).unwrap();
        assert_eq!(undo.purge_finished, None, "the group's own message is in the scope");
        apply_writes(&store.shared, &db, pending).unwrap();
        assert!(db.get(scope.marker_key()).unwrap().is_some(), "the marker stays");

        // The purger reads again and finds the message; once it is gone the purge finishes.
        let mut pending = Writes::new();
        let undo = build(&mut pending, Vec::new(), Some(purge::Step { scope, ids: vec![m.id] })).unwrap();
        assert_eq!(undo.purge_finished, None);
        let undo = build(&mut pending, Vec::new(), empty_step()).unwrap();
        assert_eq!(undo.purge_finished, Some(scope));
        apply_writes(&store.shared, &db, pending).unwrap();
        assert!(db.get(scope.marker_key()).unwrap().is_none(), "the marker is gone");
        assert!(db.get(row_key(Kind::Message, tenant, m.id)).unwrap().is_none(), "and the message");
    }

    /// The commits of one group are checked each after the earlier ones'
    /// writes, which are not applied yet (the group is one sled batch): a
    /// later commit sees an earlier one's records, versions, unique names and
    /// deletions; a failing one adds nothing; undoing the group's commits in
    /// reverse restores every key.
    #[tokio::test]
    async fn a_groups_commits_see_the_earlier_ones_writes_before_they_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = Uuid::now_v7();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let a = agent(tenant, "a", json!({"k": 1}));
        store.commit(tenant, vec![Op::Put { record: a.clone(), expect: Expect::Absent }]).await.unwrap();
        let before = dump(&store);
        let db = store.shared.db().unwrap();
        let mut pending = Writes::new();
        let mut undos = Vec::new();
        let mut build = |ops: Vec<Op>| {
            build_writes(&store.shared, &db, &pending, tenant, ops, None).map(|(writes, undo, _)| {
                pending.extend(writes);
                undos.push(undo);
            })
        };

        let b = agent(tenant, "b", json!({}));
        let mut a1 = a.clone();
        a1.unique = Some("a1".into());
        build(vec![
            Op::Put { record: b.clone(), expect: Expect::Absent },
            Op::Put { record: a1.clone(), expect: Expect::Version(0) },
        ])
        .unwrap();
        let taken = agent(tenant, "b", json!({}));
        let e = build(vec![Op::Put { record: taken.clone(), expect: Expect::Absent }]).unwrap_err();
        assert!(matches!(e, StoreError::Duplicate { .. }), "an earlier commit's name is taken: {e:?}");
        let e = build(vec![Op::Put { record: a.clone(), expect: Expect::Version(0) }]).unwrap_err();
        assert!(matches!(e, StoreError::Stale), "an earlier commit's version counts: {e:?}");
        let e = build(vec![Op::Put { record: b.clone(), expect: Expect::Absent }]).unwrap_err();
        assert!(matches!(e, StoreError::IdTaken { .. }), "an earlier commit's record exists: {e:?}");
        let reuse = agent(tenant, "a", json!({}));
        build(vec![
            Op::Delete { kind: Kind::Agent, id: b.id, version: Some(0) },
            Op::Put { record: reuse.clone(), expect: Expect::Absent },
        ])
        .unwrap();
        let e = build(vec![Op::Require { kind: Kind::Agent, id: b.id }]).unwrap_err();
        assert!(matches!(e, StoreError::NotFound { .. }), "an earlier commit's deletion counts: {e:?}");
        assert_eq!(undos.len(), 2, "only the commits that passed are in the group");
        assert!(dump(&store) == before, "nothing is applied before the group's batch");

        apply_writes(&store.shared, &db, std::mem::take(&mut pending)).unwrap();
        assert_eq!(store.get(tenant, Kind::Agent, a.id).await.unwrap().unwrap().version, 1);
        assert!(store.get(tenant, Kind::Agent, b.id).await.unwrap().is_none());
        assert_eq!(store.lookup_unique(tenant, Kind::Agent, tenant, "a").await.unwrap(), Some(reuse.id));
        assert_eq!(store.lookup_unique(tenant, Kind::Agent, tenant, "a1").await.unwrap(), Some(a.id));
        assert_eq!(store.lookup_unique(tenant, Kind::Agent, tenant, "b").await.unwrap(), None);
        assert!(store.get(tenant, Kind::Agent, taken.id).await.unwrap().is_none());

        db.apply_batch(undo_batch(&undos).unwrap()).unwrap();
        assert!(dump(&store) == before, "undoing the group restores every key");
    }

    /// A commit whose waiter gave up before the writer took it is never applied.
    #[tokio::test]
    async fn a_commit_past_its_deadline_is_not_applied() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = Uuid::now_v7();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let db = store.shared.db().unwrap();
        let late = agent(tenant, "late", json!({}));
        let (reply, _rx) = tokio::sync::oneshot::channel();
        let job = Job {
            tenant,
            ops: vec![Op::Put { record: late.clone(), expect: Expect::Absent }],
            state: Arc::new(AtomicU8::new(PENDING)),
            deadline: Instant::now(),
            reply,
            purge: None,
        };
        assert!(!job.take(), "a job past its deadline is abandoned");
        assert_eq!(job.state.load(Ordering::Acquire), ABANDONED);
        assert!(db.get(row_key(Kind::Agent, tenant, late.id)).unwrap().is_none());
    }
}
