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
//! Writes go through one writer thread with group commit: it drains every
//! queued commit, applies each as one atomic `Batch` (so a failing commit
//! never fails its neighbours and readers never see half of one), then makes
//! the whole group durable with one `flush()` (plus an `fdatasync` when
//! configured) before answering any of them. `flush_async` is never used: it
//! deadlocks sled 0.34.7 under concurrency (see STACK.md, sled#1308).
//!
//! Keys starting with byte 0 are reserved for the store's identity and commit
//! sequence ([`super::manifest`]); what opening checks is in [`super::open`].

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

use async_trait::async_trait;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::manifest::{Checkpointer, Sequence};
use super::open::{OpenError, Opened, open_checked};
use super::{
    Direction, Expect, Kind, ListQuery, Metadata, Op, Record, SortBy, Store, StoreError, StoreResult,
};

const SORTS: [SortBy; 2] = [SortBy::CreatedAt, SortBy::UpdatedAt];
/// How many commits one group may take before it is flushed.
const MAX_GROUP: usize = 512;

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

struct Job {
    tenant: Uuid,
    ops: Vec<Op>,
    reply: tokio::sync::oneshot::Sender<StoreResult<()>>,
}

/// Counters of the writer: how well group commit is grouping.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub groups: std::sync::atomic::AtomicU64,
    pub commits: std::sync::atomic::AtomicU64,
}

pub struct SledStore {
    tree: sled::Db,
    stats: std::sync::Arc<WriterStats>,
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    opened: Opened,
    sequence: std::sync::Arc<Sequence>,
    /// Declared after `tree` on purpose: fields drop in order, so its drop (the
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

impl SledStore {
    /// Opens (or creates) the store in `dir`, refusing one that lost data (see
    /// [`SledStore::open_with`]).
    pub fn open(dir: &Path, durability: Durability) -> StoreResult<Self> {
        Self::open_with(dir, OpenOptions { durability, accept_data_loss: false }).map_err(io)
    }

    /// Opens the store in `dir`: creates it when the dir holds nothing of ours,
    /// refuses it when it is in use, lost data or is corrupt (see [`super::open`]).
    pub fn open_with(dir: &Path, options: OpenOptions) -> Result<Self, OpenError> {
        let (db, opened) = open_checked(dir, options.accept_data_loss)?;
        let fail = |e: std::io::Error| OpenError::Io { dir: dir.to_path_buf(), what: e.to_string() };
        let sync_file = match options.durability {
            Durability::Fsync => Some(File::open(dir.join("db")).map_err(fail)?),
            Durability::Flush => None,
        };
        let sequence = Sequence::starting_at(opened.sequence);
        let checkpointer =
            Checkpointer::start(dir, opened.store_id, sequence.clone(), opened.sequence).map_err(fail)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let tree = db.clone();
        let stats = std::sync::Arc::new(WriterStats::default());
        let (writer_stats, writer_sequence) = (stats.clone(), sequence.clone());
        let writer = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer_loop(tree, rx, sync_file, &writer_stats, &writer_sequence))
            .map_err(fail)?;
        Ok(SledStore {
            tree: db,
            stats,
            queue: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            opened,
            sequence,
            checkpointer: Mutex::new(CleanStop { checkpointer, flushed: false }),
        })
    }

    /// What the open found: the store id, its commit sequence then, and how it opened.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// (groups flushed, commits applied) since the store was opened.
    pub fn writer_stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.stats.groups.load(Relaxed), self.stats.commits.load(Relaxed))
    }

    /// Stops the writer after it has finished what is queued, and flushes.
    pub fn close(&self) {
        self.queue.lock().expect("queue lock").take();
        if let Some(h) = self.writer.lock().expect("writer lock").take() {
            let _ = h.join();
        }
        let mut clean = self.checkpointer.lock().expect("checkpointer lock");
        clean.checkpointer.stop();
        if self.tree.flush().is_ok() {
            self.sequence.all_flushed();
            clean.flushed = true;
        }
    }

    fn record(&self, key: &[u8]) -> StoreResult<Option<Record>> {
        match self.tree.get(key).map_err(io)? {
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

/// A stable hash of one metadata `key = value` pair.
fn meta_hash(key: &str, value: &Value) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0]);
    canonical(value, &mut h);
    let d = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// Feeds a JSON value to the hasher with object keys sorted, whatever the map order.
fn canonical(v: &Value, h: &mut Sha256) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                canonical(&m[k], h);
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for x in a {
                canonical(x, h);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => h.update(other.to_string().as_bytes()),
    }
}

fn meta_prefix(kind: Kind, tenant: Uuid, scope: Uuid, key: &str, value: &Value, s: SortBy) -> Vec<u8> {
    let mut k = scope_prefix(b'm', kind, tenant, scope);
    k.extend_from_slice(&meta_hash(key, value));
    k.push(sort_byte(s));
    k
}

fn meta_key(r: &Record, tenant: Uuid, key: &str, value: &Value, s: SortBy) -> Vec<u8> {
    let mut k = meta_prefix(r.kind, tenant, r.scope, key, value, s);
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
                keys.push(meta_key(r, tenant, k, v, s));
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

fn writer_loop(
    db: sled::Db,
    rx: mpsc::Receiver<Job>,
    sync_file: Option<File>,
    stats: &WriterStats,
    sequence: &Sequence,
) {
    use std::sync::atomic::Ordering::Relaxed;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(j) => group.push(j),
                Err(_) => break,
            }
        }
        stats.groups.fetch_add(1, Relaxed);
        stats.commits.fetch_add(group.len() as u64, Relaxed);
        let mut results = Vec::with_capacity(group.len());
        for job in &group {
            let r =
                build_batch(&db, job.tenant, &job.ops).and_then(|batch| db.apply_batch(batch).map_err(io));
            results.push(r);
        }
        // One flush for the whole group; nobody hears "done" before it.
        let durable = db.flush().map_err(io).and_then(|_| match &sync_file {
            Some(f) => f.sync_data().map_err(io),
            None => Ok(()),
        });
        if durable.is_ok() {
            sequence.group_flushed(&db, results.iter().filter(|r| r.is_ok()).count());
        }
        for (job, r) in group.into_iter().zip(results) {
            let r = match (&durable, r) {
                (Err(e), Ok(())) => Err(StoreError::Io(e.to_string())),
                (_, r) => r,
            };
            let _ = job.reply.send(r);
        }
    }
}

/// Reads through the writes already made by this commit.
struct Overlay<'a> {
    db: &'a sled::Db,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Overlay<'_> {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        Ok(self.db.get(key).map_err(io)?.map(|v| v.to_vec()))
    }
    fn record(&self, key: &[u8]) -> StoreResult<Option<Record>> {
        self.get(key)?.map(|v| decode(&v)).transpose()
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

fn build_batch(db: &sled::Db, tenant: Uuid, ops: &[Op]) -> StoreResult<sled::Batch> {
    let mut ov = Overlay { db, writes: BTreeMap::new() };
    for op in ops {
        match op {
            Op::Put { record, expect } => {
                let mut rec = record.clone();
                let old = ov.record(&row_key(rec.kind, tenant, rec.id))?;
                match (expect, &old) {
                    (Expect::Absent, Some(_)) => {
                        return Err(StoreError::IdTaken { kind: rec.kind, id: rec.id });
                    }
                    (Expect::Version(_), None) => {
                        return Err(StoreError::NotFound { kind: rec.kind, id: rec.id });
                    }
                    (Expect::Version(v), Some(o)) if o.version != *v => return Err(StoreError::Stale),
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
                let Some(old) = ov.record(&row_key(*kind, tenant, *id))? else {
                    return Err(StoreError::NotFound { kind: *kind, id: *id });
                };
                if version.is_some_and(|v| v != old.version) {
                    return Err(StoreError::Stale);
                }
                ov.remove_record(tenant, &old);
            }
            Op::DeleteScope { kind, scope } => {
                let mut prefix = scope_prefix(b'o', *kind, tenant, *scope);
                prefix.push(sort_byte(SortBy::CreatedAt));
                let ids: Vec<Uuid> = db
                    .scan_prefix(&prefix)
                    .keys()
                    .map(|k| k.map(|k| id_suffix(&k)).map_err(io))
                    .collect::<StoreResult<_>>()?;
                for id in ids {
                    if let Some(old) = ov.record(&row_key(*kind, tenant, id))? {
                        ov.remove_record(tenant, &old);
                    }
                }
            }
            Op::Require { kind, id } => {
                if ov.get(&row_key(*kind, tenant, *id))?.is_none() {
                    return Err(StoreError::NotFound { kind: *kind, id: *id });
                }
            }
            Op::Touch { kind, id } => {
                let key = row_key(*kind, tenant, *id);
                let Some(mut rec) = ov.record(&key)? else {
                    return Err(StoreError::NotFound { kind: *kind, id: *id });
                };
                rec.version += 1;
                ov.put(key, serde_json::to_vec(&rec).map_err(io)?);
            }
        }
    }
    let mut batch = sled::Batch::default();
    for (k, v) in ov.writes {
        match v {
            Some(v) => batch.insert(k, v),
            None => batch.remove(k),
        }
    }
    Ok(batch)
}

#[async_trait]
impl Store for SledStore {
    fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>> {
        self.record(&row_key(kind, tenant, id))
    }

    fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>> {
        let filter = q.metadata_filter.as_ref().filter(|f| !f.is_empty());
        let prefix = match filter.and_then(|f| f.iter().next()) {
            Some((k, v)) => meta_prefix(kind, tenant, scope, k, v, q.sort_by),
            None => {
                let mut p = scope_prefix(b'o', kind, tenant, scope);
                p.push(sort_byte(q.sort_by));
                p
            }
        };
        let iter = self.tree.scan_prefix(&prefix).keys();
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
            let id = id_suffix(&key.map_err(io)?);
            if filter.is_none() && skipped < q.offset {
                skipped += 1;
                continue;
            }
            let Some(raw) = self.tree.get(row_key(kind, tenant, id)).map_err(io)? else { continue };
            let r = decode(&raw)?;
            if let Some(f) = filter {
                if !matches_filter(r.metadata.as_ref(), f) {
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
        self.tree
            .scan_prefix(ref_prefix(kind, tenant, target))
            .keys()
            .map(|k| k.map(|k| id_suffix(&k)).map_err(io))
            .collect()
    }

    fn lookup_unique(&self, tenant: Uuid, kind: Kind, scope: Uuid, name: &str) -> StoreResult<Option<Uuid>> {
        Ok(self
            .tree
            .get(unique_key(kind, tenant, scope, name))
            .map_err(io)?
            .and_then(|v| Uuid::from_slice(&v).ok()))
    }

    fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
        self.tree
            .scan_prefix([b'r', kind as u8])
            .map(|kv| {
                let (k, v) = kv.map_err(io)?;
                let tenant = Uuid::from_slice(&k[2..18]).map_err(io)?;
                Ok((tenant, decode(&v)?))
            })
            .collect()
    }

    async fn commit(&self, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        {
            let queue = self.queue.lock().expect("queue lock");
            let Some(q) = queue.as_ref() else {
                return Err(StoreError::Io("the store is closed".into()));
            };
            q.send(Job { tenant, ops, reply }).map_err(|_| io("the store writer has stopped"))?;
        }
        rx.await.map_err(|_| io("the store writer has stopped"))?
    }
}

pub fn matches_filter(meta: Option<&Metadata>, filter: &Metadata) -> bool {
    filter.iter().all(|(k, v)| meta.and_then(|m| m.get(k)) == Some(v))
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
}
