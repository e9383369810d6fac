//! Deleting a whole scope (a session's messages, an agent's docs, tools and
//! tasks) without holding the writer for long.
//!
//! A commit with [`Op::DeleteScope`](crate::store::Op::DeleteScope) writes only
//! a marker (a reserved key naming kind, tenant and scope) in the same atomic
//! batch as the rest of the commit. From then on every read hides the scope's
//! records, as if they were gone. The purger, a background thread, removes
//! them in steps of at most [`STEP_RECORDS`] records or [`STEP_BYTES`] bytes,
//! each an ordinary commit of the writer (so other writes go between steps),
//! and removes the marker with the step that finds the scope empty. A crash
//! between steps leaves the marker: the next open hides the rest and the
//! purger carries on.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{Job, PENDING, Shared, SortBy, id_suffix, io, row_key, scope_prefix, sort_byte};
use crate::store::{Kind, StoreError, StoreResult};

/// A step removes at most this many records...
pub(super) const STEP_RECORDS: usize = 256;
/// ...or this many bytes of stored records (at least one record).
pub(super) const STEP_BYTES: usize = 1 << 20;
/// How soon a purge that could not go on (the store failing) tries again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

const MARKER_PREFIX: &[u8] = b"\0agent-platform/purge/";

/// The records of one kind in one scope of one tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(super) struct Scope {
    pub kind: Kind,
    pub tenant: Uuid,
    pub scope: Uuid,
}

impl Scope {
    pub fn marker_key(&self) -> Vec<u8> {
        let mut k = MARKER_PREFIX.to_vec();
        k.push(self.kind as u8);
        k.extend_from_slice(self.tenant.as_bytes());
        k.extend_from_slice(self.scope.as_bytes());
        k
    }

    pub fn marker_value(&self) -> StoreResult<Vec<u8>> {
        serde_json::to_vec(self).map_err(io)
    }
}

/// One step of a purge: these records go; when there are none, the marker goes.
pub(super) struct Step {
    pub scope: Scope,
    pub ids: Vec<Uuid>,
}

/// The scopes being purged: hidden from every read until they are gone.
#[derive(Default)]
pub(super) struct Purging {
    set: parking_lot::RwLock<HashSet<Scope>>,
    /// Whether `set` has anything: the read path's only cost when nothing is purged.
    any: AtomicBool,
}

impl Purging {
    /// Whether records of `kind` in `scope` of `tenant` are hidden.
    pub fn hides(&self, kind: Kind, tenant: Uuid, scope: Uuid) -> bool {
        self.any.load(Ordering::Acquire) && self.set.read().contains(&Scope { kind, tenant, scope })
    }

    /// Whether any scope of records of `kind` is hidden.
    pub fn hides_any_of(&self, kind: Kind) -> bool {
        self.any.load(Ordering::Acquire) && self.set.read().iter().any(|s| s.kind == kind)
    }

    pub fn add(&self, scopes: &[Scope]) {
        if scopes.is_empty() {
            return;
        }
        let mut set = self.set.write();
        set.extend(scopes.iter().copied());
        self.any.store(true, Ordering::Release);
    }

    pub fn remove(&self, scopes: &[Scope]) {
        if scopes.is_empty() {
            return;
        }
        let mut set = self.set.write();
        for s in scopes {
            set.remove(s);
        }
        self.any.store(!set.is_empty(), Ordering::Release);
    }

    fn next(&self) -> Option<Scope> {
        self.set.read().iter().next().copied()
    }

    /// The purges a previous run left unfinished.
    pub fn load(&self, db: &sled::Db) -> StoreResult<usize> {
        let mut found = Vec::new();
        for kv in db.scan_prefix(MARKER_PREFIX) {
            let (_, v) = kv.map_err(io)?;
            found.push(serde_json::from_slice(&v).map_err(|e| io(format!("corrupt purge marker: {e}")))?);
        }
        self.add(&found);
        Ok(found.len())
    }
}

/// The prefix of one key of each record of `scope` (its order key by creation).
pub(super) fn scope_keys(scope: Scope) -> Vec<u8> {
    let mut prefix = scope_prefix(b'o', scope.kind, scope.tenant, scope.scope);
    prefix.push(sort_byte(SortBy::CreatedAt));
    prefix
}

/// The next step of purging `scope`: the first records still there. Read
/// outside the writer: an empty step finishes the purge only if the writer
/// finds the scope empty too (see `build_writes`).
fn next_step(db: &sled::Db, scope: Scope) -> StoreResult<Step> {
    let prefix = scope_keys(scope);
    let mut ids = Vec::new();
    let mut bytes = 0;
    for key in db.scan_prefix(&prefix).keys() {
        let id = id_suffix(&key.map_err(io)?);
        bytes += db.get(row_key(scope.kind, scope.tenant, id)).map_err(io)?.map_or(0, |v| v.len());
        ids.push(id);
        if ids.len() >= STEP_RECORDS || bytes >= STEP_BYTES {
            break;
        }
    }
    Ok(Step { scope, ids })
}

/// Hands a step to the writer; `None` once the store is closing.
fn submit(shared: &Shared, step: Step) -> Option<tokio::sync::oneshot::Receiver<StoreResult<()>>> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    let job = Job {
        tenant: step.scope.tenant,
        ops: Vec::new(),
        purge: Some(step),
        state: Arc::new(std::sync::atomic::AtomicU8::new(PENDING)),
        deadline: Instant::now() + shared.write_timeout(),
        reply,
    };
    let queue = shared.queue.lock().expect("queue lock");
    queue.as_ref()?.send(job).ok()?;
    Some(rx)
}

/// The purger thread: works through the purges whenever woken (after a commit
/// that starts one, at open) and once a second while one is left. Holds the
/// store only for the moment of building a step, so it never keeps it open.
pub(super) fn run(shared: Weak<Shared>, wake: mpsc::Receiver<()>) {
    loop {
        if let Err(mpsc::RecvTimeoutError::Disconnected) = wake.recv_timeout(RETRY_EVERY) {
            return;
        }
        loop {
            let Some(s) = shared.upgrade() else { return };
            if s.closing.load(Ordering::Acquire) {
                return;
            }
            if s.failing.load(Ordering::Acquire) {
                break;
            }
            #[cfg(test)]
            if s.purger_paused.load(Ordering::Acquire) {
                break;
            }
            let Some(scope) = s.purging.next() else { break };
            let Ok(db) = s.db() else { break };
            let step = match next_step(&db, scope) {
                Ok(step) => step,
                Err(e) => {
                    eprintln!("store: cannot read the {} records left to delete: {e}", scope.kind.name());
                    break;
                }
            };
            drop(db);
            let Some(rx) = submit(&s, step) else { return };
            drop(s);
            match rx.blocking_recv() {
                Ok(Ok(())) => continue,
                Ok(Err(StoreError::Full(_) | StoreError::Unavailable(_))) | Err(_) => break,
                Ok(Err(e)) => {
                    eprintln!("store: a step deleting {} records failed: {e}", scope.kind.name());
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use serde_json::json;
    use uuid::Uuid;

    use super::super::{Durability, SledStore, row_key};
    use super::{STEP_RECORDS, Scope};
    use crate::store::{Expect, Kind, ListQuery, Op, Record, Store};

    /// A session (scope) with `n` messages, written `STEP_RECORDS` at a time.
    async fn session_with_messages(store: &SledStore, tenant: Uuid, n: usize) -> (Uuid, Vec<Uuid>) {
        let session = Record::fresh(Kind::Session, Uuid::nil(), json!({}));
        let sid = session.id;
        store.commit(tenant, vec![Op::Put { record: session, expect: Expect::Absent }]).await.unwrap();
        let mut ids = Vec::new();
        for chunk in (0..n).collect::<Vec<_>>().chunks(STEP_RECORDS) {
            let mut ops = Vec::new();
            for i in chunk {
                let mut m = Record::fresh(Kind::Message, sid, json!({"content": format!("m{i}")}));
                m.metadata = json!({"i": i}).as_object().cloned();
                ids.push(m.id);
                ops.push(Op::Put { record: m, expect: Expect::Absent });
            }
            store.commit(tenant, ops).await.unwrap();
        }
        (sid, ids)
    }

    async fn delete_session(store: &SledStore, tenant: Uuid, sid: Uuid) {
        let ops = vec![
            Op::Delete { kind: Kind::Session, id: sid, version: None },
            Op::DeleteScope { kind: Kind::Message, scope: sid },
        ];
        store.commit(tenant, ops).await.unwrap();
    }

    /// Keys of any kind (rows, order and metadata index) still on disk for these messages.
    fn keys_left(store: &SledStore, tenant: Uuid, sid: Uuid, ids: &[Uuid]) -> usize {
        let db = store.shared.db().unwrap();
        let rows =
            ids.iter().filter(|id| db.get(row_key(Kind::Message, tenant, **id)).unwrap().is_some()).count();
        let scoped = [b'o', b'm']
            .iter()
            .map(|tag| db.scan_prefix(super::super::scope_prefix(*tag, Kind::Message, tenant, sid)).count())
            .sum::<usize>();
        let marker = Scope { kind: Kind::Message, tenant, scope: sid }.marker_key();
        rows + scoped + usize::from(db.get(marker).unwrap().is_some())
    }

    fn wait_until_purged(store: &SledStore, tenant: Uuid, sid: Uuid, ids: &[Uuid]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        // The scope stops being hidden once the last step is durable, a moment after it is applied.
        while keys_left(store, tenant, sid, ids) > 0 || store.shared.purging.hides(Kind::Message, tenant, sid)
        {
            assert!(Instant::now() < deadline, "the purge did not finish within 60 s");
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deleted_scope_is_hidden_at_once_and_removed_in_bounded_steps() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let tenant = Uuid::now_v7();
        let n = 2 * STEP_RECORDS + STEP_RECORDS / 2;
        let (sid, ids) = session_with_messages(&store, tenant, n).await;
        let (_, commits_before) = store.writer_stats();

        delete_session(&store, tenant, sid).await;
        // Whatever the purger has done by now, nothing of the session shows.
        let q = ListQuery { limit: 10, ..Default::default() };
        assert!(store.list(tenant, Kind::Message, sid, &q).await.unwrap().is_empty());
        assert!(store.get(tenant, Kind::Message, ids[0]).await.unwrap().is_none());
        assert!(store.get(tenant, Kind::Message, ids[n - 1]).await.unwrap().is_none());
        assert!(store.scan_kind(Kind::Message).await.unwrap().is_empty());

        wait_until_purged(&store, tenant, sid, &ids);
        let (_, commits_after) = store.writer_stats();
        // The delete, three steps of at most STEP_RECORDS, and the step that finds none left.
        assert_eq!(commits_after - commits_before, 1 + 3 + 1, "one commit per bounded step");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purge_left_unfinished_carries_on_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let tenant = Uuid::now_v7();
        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let (sid, ids) = session_with_messages(&store, tenant, 1500).await;
        let (kept, kept_ids) = session_with_messages(&store, tenant, 3).await;
        store.shared.purger_paused.store(true, Ordering::Release);
        delete_session(&store, tenant, sid).await;
        assert!(keys_left(&store, tenant, sid, &ids) > 0, "the paused purger removed nothing");
        drop(store);

        let store = SledStore::open(dir.path(), Durability::Flush).unwrap();
        assert!(
            store.get(tenant, Kind::Message, ids[0]).await.unwrap().is_none(),
            "still hidden after the reopen"
        );
        wait_until_purged(&store, tenant, sid, &ids);
        let q = ListQuery { limit: 10, ..Default::default() };
        assert_eq!(
            store.list(tenant, Kind::Message, kept, &q).await.unwrap().len(),
            3,
            "other scopes are untouched"
        );
        assert!(store.get(tenant, Kind::Message, kept_ids[0]).await.unwrap().is_some());
    }
}
