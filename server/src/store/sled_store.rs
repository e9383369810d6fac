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
//! queued commit, applies each as one atomic `Batch` (so a failing commit
//! never fails its neighbours and readers never see half of one), then makes
//! the whole group durable with one `flush()` (plus an `fdatasync` when
//! configured) before answering any of them. `flush_async` is never used: it
//! deadlocks sled 0.34.7 under concurrency (see STACK.md, sled#1308).
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

use super::filter::{canonical, metadata_matches};
use super::manifest::{Checkpointer, Sequence};
use super::open::{OpenError, Opened, open_checked};
use super::{Direction, Expect, Kind, ListQuery, Op, Record, SortBy, Store, StoreError, StoreResult};

mod upgrade;

const SORTS: [SortBy; 2] = [SortBy::CreatedAt, SortBy::UpdatedAt];
/// How many commits one group may take before it is flushed.
const MAX_GROUP: usize = 512;
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
            // If this fails the manifest keeps its last checkpoint, without a
            // clean stop: the next open still checks the sequence.
            let _ = self.checkpointer.write_clean_stop();
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
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Opens sled in `dir` (the store's open and the writer's reopen).
fn open_db(dir: &Path) -> StoreResult<sled::Db> {
    sled::Config::new()
        .path(dir)
        .flush_every_ms(Some(500))
        .open()
        .map_err(|e| io(format!("cannot open the store in {}: {e}", dir.display())))
}

impl SledStore {
    /// Opens (or creates) the store in `dir`, refusing one that lost data (see
    /// [`SledStore::open_with`]).
    pub fn open(dir: &Path, durability: Durability) -> StoreResult<Self> {
        Self::open_with(dir, OpenOptions { durability, accept_data_loss: false }).map_err(io)
    }

    /// Opens the store in `dir`: creates it when the dir holds nothing of ours,
    /// refuses it when it is in use, lost data or is corrupt (see [`super::open`]).
    pub fn open_with(dir: &Path, options: OpenOptions) -> Result<Self, OpenError> {
        let durability = options.durability;
        let (db, opened) = open_checked(dir, options.accept_data_loss)?;
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

// ---- keys ----

fn row_key(kind: Kind, tenant: Uuid, id: Uuid) -> Vec<u8> {
    let mut k = Vec::with_capacity(34);
    k.push(b'r');
    k.push(kind as u8);
    k.extend_from_slice(tenant.as_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

fn scope_prefix(tag: u8, kind: Kind, tenant: Uuid, scope: Uuid) -> Vec<u8> {
    let mut k = Vec::with_capacity(80);
    k.push(tag);
    k.push(kind as u8);
    k.extend_from_slice(tenant.as_bytes());
    k.extend_from_slice(scope.as_bytes());
    k
}

fn sort_byte(s: SortBy) -> u8 {
    match s {
        SortBy::CreatedAt => b'c',
        SortBy::UpdatedAt => b'u',
    }
}

fn sort_ts(r: &Record, s: SortBy) -> u64 {
    let t = match s {
        SortBy::CreatedAt => r.created_at,
        SortBy::UpdatedAt => r.updated_at,
    };
    // Offset so that any representable time sorts correctly as unsigned.
    (t.timestamp_micros() as u64) ^ (1 << 63)
}

fn order_key(r: &Record, tenant: Uuid, s: SortBy) -> Vec<u8> {
    let mut k = scope_prefix(b'o', r.kind, tenant, r.scope);
    k.push(sort_byte(s));
    k.extend_from_slice(&sort_ts(r, s).to_be_bytes());
    k.extend_from_slice(r.id.as_bytes());
    k
}

/// A stable hash of one metadata `key = value` pair: values equal as a filter
/// compares them ([`super::filter::values_equal`]) hash alike, so `{"n": 1}` finds a
/// record stored with `{"n": 1.0}`.
fn meta_hash(key: &str, value: &Value) -> [u8; 8] {
    let mut text = Vec::with_capacity(key.len() + 16);
    text.extend_from_slice(key.as_bytes());
    text.push(0);
    canonical(value, &mut text);
    hash_prefix(&text)
}

/// The first 8 bytes of the SHA-256 of `bytes`.
fn hash_prefix(bytes: &[u8]) -> [u8; 8] {
    let d = Sha256::digest(bytes);
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// The keys of one metadata pair's index, up to the sort; `hash` is its [`meta_hash`].
fn meta_prefix(kind: Kind, tenant: Uuid, scope: Uuid, hash: [u8; 8], s: SortBy) -> Vec<u8> {
    let mut k = scope_prefix(b'm', kind, tenant, scope);
    k.extend_from_slice(&hash);
    k.push(sort_byte(s));
    k
}

fn meta_key(r: &Record, tenant: Uuid, hash: [u8; 8], s: SortBy) -> Vec<u8> {
    let mut k = meta_prefix(r.kind, tenant, r.scope, hash, s);
    k.extend_from_slice(&sort_ts(r, s).to_be_bytes());
    k.extend_from_slice(r.id.as_bytes());
    k
}

fn ref_prefix(kind: Kind, tenant: Uuid, target: Uuid) -> Vec<u8> {
    scope_prefix(b'f', kind, tenant, target)
}

fn unique_key(kind: Kind, tenant: Uuid, scope: Uuid, name: &str) -> Vec<u8> {
    let mut k = scope_prefix(b'u', kind, tenant, scope);
    k.extend_from_slice(name.as_bytes());
    k
}

fn id_suffix(key: &[u8]) -> Uuid {
    let mut b = [0u8; 16];
    b.copy_from_slice(&key[key.len() - 16..]);
    Uuid::from_bytes(b)
}

/// Every index key a record owns (not its row).
fn index_keys(r: &Record, tenant: Uuid) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for s in SORTS {
        keys.push(order_key(r, tenant, s));
        if let Some(m) = &r.metadata {
            for (k, v) in m {
                keys.push(meta_key(r, tenant, meta_hash(k, v), s));
            }
        }
    }
    for target in &r.refs {
        let mut k = ref_prefix(r.kind, tenant, *target);
        k.extend_from_slice(r.id.as_bytes());
        keys.push(k);
    }
    keys
}

// ---- the writer ----

/// How to take one applied commit back: delete every key it wrote, then put
/// back every row it read from the store before (with that row's index keys
/// and unique key). Taken back in reverse order, the commits of a group
/// restore exactly the state before the group, whichever of them reached the
/// disk: each key ends as the first commit that touched it found it.
struct Undo {
    tenant: Uuid,
    written: Vec<IVec>,
    /// Rows as stored before the commit, for every record it read.
    originals: Vec<IVec>,
    /// Scopes the commit started purging (hidden while it is applied, shown again if undone).
    purges_started: Vec<purge::Scope>,
    /// The scope whose purge the commit finished (shown no more once it is durable).
    purge_finished: Option<purge::Scope>,
}

/// One batch restoring the state before `undos` (in the order they were applied).
fn undo_batch(undos: &[Undo]) -> StoreResult<sled::Batch> {
    let mut batch = sled::Batch::default();
    for u in undos.iter().rev() {
        for k in &u.written {
            batch.remove(k.clone());
        }
        for raw in &u.originals {
            let r = decode(raw)?;
            for k in index_keys(&r, u.tenant) {
                batch.insert(k, IVec::default());
            }
            if let Some(name) = &r.unique {
                batch.insert(unique_key(r.kind, u.tenant, r.scope, name), r.id.as_bytes().to_vec());
            }
            batch.insert(row_key(r.kind, u.tenant, r.id), raw.clone());
        }
    }
    Ok(batch)
}

/// A failed group on its way back: the batch that undoes it, and whether the
/// sled handle must be reopened before it can be applied.
struct Recovery {
    undo: Option<sled::Batch>,
    reopen: bool,
    /// The first attempt is at once; later ones once the disk takes a probe write.
    attempts: u32,
    since: Instant,
}

struct Writer {
    shared: Arc<Shared>,
    /// `None` only while reopening.
    db: Option<sled::Db>,
    rx: mpsc::Receiver<Job>,
    durability: Durability,
    sync_file: Option<File>,
    /// Set while the store cannot write.
    recovery: Option<Recovery>,
    /// The commit sequence kept in sled beside the records ([`super::manifest`]).
    sequence: Arc<Sequence>,
}

impl Writer {
    fn open_sync_file(&self) -> std::io::Result<Option<File>> {
        match self.durability {
            Durability::Fsync => File::open(self.shared.dir.join("db")).map(Some),
            Durability::Flush => Ok(None),
        }
    }

    fn run(mut self) {
        let mut next_probe = Instant::now();
        loop {
            if self.recovery.is_some() {
                // Nothing queues behind a dead disk: answer at once, probe on time.
                match self.rx.recv_timeout(next_probe.saturating_duration_since(Instant::now())) {
                    Ok(job) => self.refuse(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.recover();
                        next_probe = Instant::now() + PROBE_EVERY;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
                continue;
            }
            let Ok(first) = self.rx.recv() else { break };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match self.rx.try_recv() {
                    Ok(j) => group.push(j),
                    Err(_) => break,
                }
            }
            self.commit_group(group);
            next_probe = Instant::now() + PROBE_EVERY;
        }
        if self.recovery.is_none()
            && let Some(db) = &self.db
        {
            let _ = db.flush();
        }
    }

    fn refuse(&self, job: Job) {
        let err = self.shared.health().err().unwrap_or_else(|| {
            StoreError::Unavailable("the store is recovering from a failed write; retry in a second".into())
        });
        let _ = job.reply.send(Err(err));
    }

    fn commit_group(&mut self, mut group: Vec<Job>) {
        let stats = &self.shared.stats;
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.commits.fetch_add(group.len() as u64, Ordering::Relaxed);
        let db = self.db.as_ref().expect("a healthy writer has a handle");
        let mut results = Vec::with_capacity(group.len());
        let mut undos = Vec::with_capacity(group.len());
        // One statvfs per group; each commit then spends from it.
        let reserve = self.shared.min_free_bytes.load(Ordering::Relaxed);
        let mut free = fs2::available_space(&self.shared.dir).ok().filter(|_| reserve > 0);
        let mut low_space = None;
        // sled failed inside a write: its handle may be wedged, so no flush on it.
        let mut sled_failed = None;
        for job in &mut group {
            if !job.take() {
                // Its waiter has answered 503 "not saved": it must stay so.
                results
                    .push(Err(StoreError::Unavailable("the write timed out before it was applied".into())));
                continue;
            }
            if let Some(e) = &sled_failed {
                results.push(Err(StoreError::clone(e)));
                continue;
            }
            // Owned: a record is moved into its batch, not copied (records reach megabytes).
            let ops = std::mem::take(&mut job.ops);
            let r = build_batch(&self.shared, db, job.tenant, ops, job.purge.as_ref()).and_then(
                |(batch, undo, bytes)| {
                    if let Some(f) = free.as_mut() {
                        let needed = bytes.saturating_mul(SPACE_PER_BYTE);
                        if *f < reserve.saturating_add(needed) {
                            let e = self.shared.low_space_error();
                            low_space = Some(e.clone());
                            return Err(e);
                        }
                        *f -= needed;
                    }
                    // Hidden before the parent's deletion shows, so no reader sees orphans.
                    self.shared.purging.add(&undo.purges_started);
                    if let Err(e) = db.apply_batch(batch) {
                        self.shared.purging.remove(&undo.purges_started);
                        return Err(self.shared.sled_write_error(e));
                    }
                    undos.push(undo);
                    Ok(())
                },
            );
            // A storage error from sled (reading or applying) that is not ours: its handle is broken.
            if let Err(e @ (StoreError::Full(_) | StoreError::Unavailable(_))) = &r
                && low_space.is_none()
            {
                sled_failed = Some(e.clone());
            }
            results.push(r);
        }
        // One flush for the whole group; nobody hears "done" before it.
        let durable = match &sled_failed {
            Some(e) => Err(e.clone()),
            None => self.make_durable(),
        };
        match durable {
            Ok(()) => {
                // The group is durable.
                self.sequence.group_flushed(db, results.iter().filter(|r| r.is_ok()).count());
                let finished: Vec<_> = undos.iter().filter_map(|u| u.purge_finished).collect();
                self.shared.purging.remove(&finished);
                if undos.iter().any(|u| !u.purges_started.is_empty()) {
                    let _ = self.shared.purge_wake.send(());
                }
                if let Some(e) = low_space {
                    // Nothing was applied past the reserve: there is nothing to undo.
                    self.shared.set_failure(e);
                    self.recovery =
                        Some(Recovery { undo: None, reopen: false, attempts: 1, since: Instant::now() });
                }
                for (job, r) in group.into_iter().zip(results) {
                    let _ = job.reply.send(r);
                }
            }
            Err(e) => {
                // Taken back before anyone hears of the failure.
                self.fail(e.clone(), &undos, sled_failed.is_some());
                for (job, r) in group.into_iter().zip(results) {
                    let r = match r {
                        // sled failed inside a write: if its handle is wedged, the undo
                        // cannot reach the disk (the process exits, see `recover`), and
                        // what was applied before may be there after the restart.
                        Ok(()) if sled_failed.is_some() => Err(StoreError::Unavailable(
                            "the store's disk failed while saving this write: it may or may not have \
                             been saved; retry it with the same Idempotency-Key once the store is back"
                                .into(),
                        )),
                        Ok(()) | Err(StoreError::Full(_) | StoreError::Unavailable(_)) => Err(e.clone()),
                        other => other,
                    };
                    let _ = job.reply.send(r);
                }
                self.recover();
            }
        }
    }

    /// `flush()` then, when configured, `fdatasync`: the durability point.
    fn make_durable(&self) -> StoreResult<()> {
        let db = self.db.as_ref().ok_or_else(|| StoreError::Unavailable("the store has no handle".into()))?;
        self.shared.flushing_since.store(self.shared.now_ms(), Ordering::Release);
        let r = db.flush().map_err(|e| self.shared.sled_write_error(e)).and_then(|_| match &self.sync_file {
            Some(f) => f.sync_data().map_err(|e| self.shared.io_write_error(e)),
            None => Ok(()),
        });
        self.shared.flushing_since.store(0, Ordering::Release);
        #[cfg(test)]
        if self.shared.fail_next_flush.swap(false, Ordering::AcqRel) {
            return Err(StoreError::Unavailable("injected flush failure".into()));
        }
        r
    }

    /// A group failed: refuse writes and take the group back in memory if sled lets us.
    fn fail(&mut self, e: StoreError, undos: &[Undo], wedged: bool) {
        eprintln!("store: a write failed, refusing writes until the disk recovers: {e}");
        self.shared.set_failure(e);
        for u in undos {
            self.shared.purging.remove(&u.purges_started);
        }
        let undo = match undo_batch(undos) {
            Ok(b) => Some(b),
            Err(err) => {
                // Only a row that does not decode can get here, and it was decoded once already.
                eprintln!("store: cannot build the undo of a failed group: {err}");
                None
            }
        };
        // Take it back in memory at once, so no reader sees a write answered with an error.
        let undone = match (&undo, &self.db) {
            (Some(b), Some(db)) => db.apply_batch(b.clone()).is_ok(),
            _ => true,
        };
        let reopen = wedged || !undone;
        self.recovery = Some(Recovery { undo, reopen, attempts: 0, since: Instant::now() });
    }

    /// One attempt to make the store writable again (see the module docs).
    fn recover(&mut self) {
        let Some(rec) = self.recovery.as_mut() else { return };
        rec.attempts += 1;
        // A quarter more than the reserve, so that writes do not flap around its edge.
        let reserve = self.shared.min_free_bytes.load(Ordering::Relaxed);
        if fs2::available_space(&self.shared.dir).is_ok_and(|f| f < reserve.saturating_add(reserve / 4)) {
            return self.shared.set_failure(self.shared.low_space_error());
        }
        if rec.attempts > 1
            && let Err(e) = probe_disk(&self.shared.dir)
        {
            self.shared.set_failure(self.shared.io_write_error(e));
            return;
        }
        if rec.reopen {
            // sled keeps its first IO error for good: only a new handle writes again,
            // and sled's file lock admits a new one only once every old one is gone.
            self.shared.db.write().expect("db lock").take();
            if let Some(old) = self.db.take() {
                // Dropping may wait on sled's threads forever: never in the writer.
                let closer = std::thread::Builder::new().name("store-close".into()).spawn(move || drop(old));
                // It usually takes milliseconds; readers wait for the new handle meanwhile.
                let deadline = Instant::now() + Duration::from_secs(1);
                while closer.as_ref().is_ok_and(|h| !h.is_finished()) && Instant::now() < deadline {
                    std::thread::park_timeout(Duration::from_millis(5));
                }
            }
            match open_db(&self.shared.dir) {
                Ok(db) => {
                    *self.shared.db.write().expect("db lock") = Some(db.clone());
                    self.db = Some(db);
                    rec.reopen = false;
                    match self.open_sync_file() {
                        Ok(f) => self.sync_file = f,
                        Err(e) => return self.shared.set_failure(self.shared.io_write_error(e)),
                    }
                }
                Err(e) => {
                    if e.to_string().contains("could not acquire lock")
                        && rec.since.elapsed() > REOPEN_GIVE_UP
                    {
                        // The old handle is wedged inside sled and keeps the file
                        // lock: only a new process can open the store again.
                        eprintln!(
                            "error: the store in {} cannot recover in-process: after a failed write \
                             sled does not let go of its files ({e}); exiting so that a supervisor \
                             restarts the server (free space or fix the disk first). Every write \
                             answered 2xx is on disk.",
                            self.shared.dir.display()
                        );
                        std::process::exit(75);
                    }
                    eprintln!("store: cannot reopen yet: {e}");
                    return;
                }
            }
        }
        let db = self.db.as_ref().expect("reopened above");
        let rec = self.recovery.as_mut().expect("recovering");
        if let Some(b) = &rec.undo
            && let Err(e) = db.apply_batch(b.clone())
        {
            rec.reopen = true;
            return self.shared.set_failure(self.shared.sled_write_error(e));
        }
        if let Err(e) = self.make_durable() {
            if let Some(rec) = self.recovery.as_mut() {
                rec.reopen = true;
            }
            return self.shared.set_failure(e);
        }
        self.recovery = None;
        self.shared.clear_failure();
        eprintln!("store: the disk takes writes again; writes resumed");
    }
}

/// Whether the disk holding `dir` takes a write now.
fn probe_disk(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join(PROBE_FILE);
    let r = (|| {
        let mut f = File::create(&path)?;
        f.write_all(&vec![0u8; PROBE_BYTES])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&path);
    r
}

/// Wakes a writer stuck in `flush()`: a second flush sees sled's error and signals.
/// Runs until the store is dropped.
fn watchdog(shared: std::sync::Weak<Shared>) {
    let kicking = Arc::new(AtomicBool::new(false));
    loop {
        std::thread::park_timeout(Duration::from_millis(200));
        let Some(shared) = shared.upgrade() else { return };
        let stuck = shared.flushing_for().unwrap_or_default();
        if stuck > 2 * shared.write_timeout() {
            // Not woken by the kick: sled is wedged (a write it gave up on left
            // its log buffer unfinished) and no handle of it can close.
            eprintln!(
                "error: the store in {} has not completed a write for {} s and sled cannot recover \
                 in-process; exiting so that a supervisor restarts the server (check the disk and \
                 free space first). Every write answered 2xx is on disk.",
                shared.dir.display(),
                stuck.as_secs()
            );
            std::process::exit(75);
        }
        if stuck > KICK_AFTER && !kicking.swap(true, Ordering::AcqRel) {
            // The kick itself may block (a disk that truly hangs): never in the watchdog.
            let db = shared.db.read().expect("db lock").clone();
            let kicking = kicking.clone();
            let _ = std::thread::Builder::new().name("store-kick".into()).spawn(move || {
                if let Some(db) = db {
                    let _ = db.flush();
                }
                kicking.store(false, Ordering::Release);
            });
        }
    }
}

/// Reads through the writes already made by this commit.
struct Overlay<'a> {
    db: &'a sled::Db,
    shared: &'a Shared,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Every row read from the store (not from `writes`), as stored: the undo's originals.
    originals: Vec<IVec>,
}

impl Overlay<'_> {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        Ok(self.db.get(key).map_err(|e| self.shared.sled_write_error(e))?.map(|v| v.to_vec()))
    }
    fn record(&mut self, key: &[u8]) -> StoreResult<Option<Record>> {
        if let Some(v) = self.writes.get(key) {
            return v.as_deref().map(decode).transpose();
        }
        let Some(raw) = self.db.get(key).map_err(|e| self.shared.sled_write_error(e))? else {
            return Ok(None);
        };
        let rec = decode(&raw)?;
        self.originals.push(raw);
        Ok(Some(rec))
    }
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }
    fn del(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }

    fn remove_record(&mut self, tenant: Uuid, r: &Record) {
        self.del(row_key(r.kind, tenant, r.id));
        for k in index_keys(r, tenant) {
            self.del(k);
        }
        if let Some(name) = &r.unique {
            self.del(unique_key(r.kind, tenant, r.scope, name));
        }
    }

    fn write_record(&mut self, tenant: Uuid, r: &Record) -> StoreResult<()> {
        let bytes = serde_json::to_vec(r).map_err(io)?;
        self.put(row_key(r.kind, tenant, r.id), bytes);
        for k in index_keys(r, tenant) {
            self.put(k, Vec::new());
        }
        if let Some(name) = &r.unique {
            self.put(unique_key(r.kind, tenant, r.scope, name), r.id.as_bytes().to_vec());
        }
        Ok(())
    }
}

/// The batch of one commit, how to undo it, and how many bytes it writes.
fn build_batch(
    shared: &Shared,
    db: &sled::Db,
    tenant: Uuid,
    ops: Vec<Op>,
    purge_step: Option<&purge::Step>,
) -> StoreResult<(sled::Batch, Undo, u64)> {
    let mut ov = Overlay { db, shared, writes: BTreeMap::new(), originals: Vec::new() };
    let mut purges_started = Vec::new();
    let mut purge_finished = None;
    if let Some(step) = purge_step {
        for id in &step.ids {
            if let Some(old) = ov.record(&row_key(step.scope.kind, tenant, *id))? {
                ov.remove_record(tenant, &old);
            }
        }
        if step.ids.is_empty() {
            ov.del(step.scope.marker_key());
            purge_finished = Some(step.scope);
        }
    }
    for op in ops {
        match op {
            Op::Put { record, expect } => {
                let mut rec = record;
                let old = ov.record(&row_key(rec.kind, tenant, rec.id))?;
                match (expect, &old) {
                    (Expect::Absent, Some(_)) => {
                        return Err(StoreError::IdTaken { kind: rec.kind, id: rec.id });
                    }
                    (Expect::Version(_), None) => {
                        return Err(StoreError::NotFound { kind: rec.kind, id: rec.id });
                    }
                    (Expect::Version(v), Some(o)) if o.version != v => return Err(StoreError::Stale),
                    _ => {}
                }
                if let Some(name) = &rec.unique
                    && let Some(holder) = ov.get(&unique_key(rec.kind, tenant, rec.scope, name))?
                    && holder.as_slice() != rec.id.as_bytes()
                {
                    return Err(StoreError::Duplicate { kind: rec.kind, name: name.clone() });
                }
                if let Some(o) = &old {
                    rec.version = o.version + 1;
                    ov.remove_record(tenant, o);
                } else {
                    rec.version = 0;
                }
                ov.write_record(tenant, &rec)?;
            }
            Op::Delete { kind, id, version } => {
                let Some(old) = ov.record(&row_key(kind, tenant, id))? else {
                    return Err(StoreError::NotFound { kind: kind, id: id });
                };
                if version.is_some_and(|v| v != old.version) {
                    return Err(StoreError::Stale);
                }
                ov.remove_record(tenant, &old);
            }
            Op::DeleteScope { kind, scope } => {
                // Only a marker: the purger removes the records, a step at a time.
                let scope = purge::Scope { kind: kind, tenant, scope: scope };
                if !shared.purging.contains(&scope) && !purges_started.contains(&scope) {
                    ov.put(scope.marker_key(), scope.marker_value()?);
                    purges_started.push(scope);
                }
            }
            Op::Require { kind, id } => {
                if ov.get(&row_key(kind, tenant, id))?.is_none() {
                    return Err(StoreError::NotFound { kind: kind, id: id });
                }
            }
            Op::Touch { kind, id } => {
                let key = row_key(kind, tenant, id);
                let Some(mut rec) = ov.record(&key)? else {
                    return Err(StoreError::NotFound { kind: kind, id: id });
                };
                rec.version += 1;
                ov.put(key, serde_json::to_vec(&rec).map_err(io)?);
            }
        }
    }
    let mut batch = sled::Batch::default();
    let mut written = Vec::with_capacity(ov.writes.len());
    let mut bytes = 0;
    for (k, v) in ov.writes {
        bytes += (k.len() + v.as_ref().map_or(0, Vec::len)) as u64;
        let k = IVec::from(k);
        written.push(k.clone());
        match v {
            Some(v) => batch.insert(k, v),
            None => batch.remove(k),
        }
    }
    Ok((batch, Undo { tenant, written, originals: ov.originals, purges_started, purge_finished }, bytes))
}

#[async_trait]
impl Store for SledStore {
    fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>> {
        let rec = self.record(&self.shared.db()?, &row_key(kind, tenant, id))?;
        Ok(rec.filter(|r| !self.shared.purging.hides(kind, tenant, r.scope)))
    }

    fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>> {
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
        let iter = db.scan_prefix(&prefix).keys();
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

    fn referencing(&self, tenant: Uuid, kind: Kind, target: Uuid) -> StoreResult<Vec<Uuid>> {
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
            if self.get(tenant, kind, id)?.is_some() {
                shown.push(id);
            }
        }
        Ok(shown)
    }

    fn lookup_unique(&self, tenant: Uuid, kind: Kind, scope: Uuid, name: &str) -> StoreResult<Option<Uuid>> {
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

    fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
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

    fn health(&self) -> StoreResult<()> {
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
        let page = |max_bytes| {
            let q = ListQuery { limit: 100, max_bytes, ..Default::default() };
            store.list(tenant, Kind::Agent, scope, &q).unwrap().len()
        };
        assert_eq!(page(None), 3);
        assert_eq!(page(Some(1)), 1, "a page always has one record");
        assert_eq!(page(Some(3000)), 2, "two records of ~1.3 KB fit 3,000 bytes, three do not");
        assert_eq!(page(Some(1 << 20)), 3);
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
        let mut a2 = store.get(tenant, Kind::Agent, a.id).unwrap().unwrap();
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
        assert_eq!(store.get(tenant, Kind::Agent, a.id).unwrap().unwrap().version, 0);
        assert_eq!(store.lookup_unique(tenant, Kind::Agent, tenant, "gone").unwrap(), Some(gone.id));
        assert!(store.get(tenant, Kind::Agent, new.id).unwrap().is_none());
        drop(store);

        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        assert!(dump(&store) == before, "the failed commit left keys behind on disk");
        store.health().unwrap();
        store.commit(tenant, ops).await.unwrap();
        assert_eq!(store.get(tenant, Kind::Agent, a.id).unwrap().unwrap().version, 2);
        assert!(store.get(tenant, Kind::Agent, gone.id).unwrap().is_none());
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
