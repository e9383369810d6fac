//! The store: records of every kind, scoped by tenant, behind one trait.
//!
//! The domain speaks in [`Record`]s and declarative [`Op`]s with preconditions
//! (insert-if-absent, replace-if-version, require-exists, unique names,
//! delete-a-whole-scope). A backend applies one commit atomically and durably,
//! or not at all. The sled backend ([`sled_store`]) is the embedded one, for
//! one process; the PostgreSQL one ([`pg_store`]) is shared by any number of
//! servers. [`backend::Backend`] is whichever the configuration chose.
//!
//! The store uses [`crate::search`] (the PostgreSQL store indexes documents
//! with its analysis; [`DocSearch`] is answered by its index too); search
//! never uses the store.

pub mod backend;
#[cfg(test)]
pub(crate) mod conformance;
pub mod doc_search;
#[cfg(test)]
pub mod intercepted;
pub mod manifest;
pub mod open;
pub mod pg_store;
pub mod sled_store;

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use self::doc_search::DocSearch;

pub use crate::metadata::Metadata;

/// What a record is. The discriminant is part of the on-disk key: never reorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Kind {
    Tenant = 1,
    ApiKey = 2,
    User = 3,
    Agent = 4,
    Session = 5,
    Message = 6,
    Tool = 7,
    Task = 8,
    Doc = 9,
    /// The remembered answer of a request sent with an `Idempotency-Key`.
    Idempotency = 10,
    /// A run of a task (scope: the task).
    Execution = 11,
    /// One committed change of an execution (scope: the execution).
    Transition = 12,
    /// The task, agent and tools an execution runs with, as read at its start
    /// (id: the execution's; scope: the execution).
    ExecutionTask = 13,
    /// An execution that has not ended (id: the execution's; scope: the nil
    /// id, one list per tenant; some stored markers have their task's id as
    /// scope, and both are read):
    /// what a starting server resumes, without reading every execution, and
    /// how many a tenant has under way (`executions.max_active_per_tenant`).
    ActiveExecution = 14,
    /// A server's claim on an execution, until `expires_at` (id: the
    /// execution's; scope: its task): on a shared store, one server runs it.
    ExecutionLease = 15,
    /// A chat under way in a session, until it ends or expires (id: the
    /// session's): on a shared store, one exchange at a time across servers.
    SessionLock = 16,
    /// A stored response of OpenAI's Responses API (scope: its session): the
    /// turn's settings and the messages it made.
    Response = 17,
    /// A secret of a tenant (scope: the nil id; unique name: its name): its
    /// value sealed with the server's secrets key (see `app::secrets`).
    Secret = 18,
    /// A background response under way (id: the response's; scope: its
    /// session): the request it runs, the messages it committed so far, how
    /// often a server began it. Deleted by the commit that ends it.
    Run = 19,
    /// A server's claim on a background response, until `expires_at` (id:
    /// the response's): on a shared store, one server runs it.
    RunLease = 20,
    /// A memory block of an agent or a user (scope: its owner; unique name: its label).
    Block = 21,
    /// One change of a memory block's value, with its provenance (scope: the block).
    BlockEdit = 22,
    /// An agent's learning policy (id and scope: the agent's).
    LearningPolicy = 23,
    /// A learning job after a turn, until it has run (scope: the nil id, one
    /// list per tenant): what the users' blocks should keep of the turn.
    LearningJob = 24,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tenant => "tenant",
            Kind::ApiKey => "api key",
            Kind::User => "user",
            Kind::Agent => "agent",
            Kind::Session => "session",
            Kind::Message => "message",
            Kind::Tool => "tool",
            Kind::Task => "task",
            Kind::Doc => "doc",
            Kind::Idempotency => "idempotency key",
            Kind::Execution => "execution",
            Kind::Transition => "transition",
            Kind::ExecutionTask => "execution's task",
            Kind::ActiveExecution => "active execution",
            Kind::ExecutionLease => "execution lease",
            Kind::SessionLock => "session lock",
            Kind::Response => "response",
            Kind::Secret => "secret",
            Kind::Run => "background response",
            Kind::RunLease => "background response lease",
            Kind::Block => "memory block",
            Kind::BlockEdit => "memory block edit",
            Kind::LearningPolicy => "learning policy",
            Kind::LearningJob => "learning job",
        }
    }
}

/// One stored record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub kind: Kind,
    pub id: Uuid,
    /// The parent (agent of a tool, session of a message, owner of a doc), or nil.
    pub scope: Uuid,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped by every replace and touch; the precondition of optimistic updates.
    pub version: u64,
    /// A name unique among the records of this kind in this scope (409 on a clash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<String>,
    /// Records this one refers to (a session's agents and users), indexed both ways.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<Uuid>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// The kind-specific fields.
    pub data: Value,
}

impl Record {
    /// The time lists sorted `by` order it by (then by id).
    pub fn sort_time(&self, by: SortBy) -> DateTime<Utc> {
        match by {
            SortBy::CreatedAt => self.created_at,
            SortBy::UpdatedAt => self.updated_at,
        }
    }

    pub fn new(kind: Kind, id: Uuid, scope: Uuid, data: Value) -> Self {
        let now = now();
        Record {
            kind,
            id,
            scope,
            created_at: now,
            updated_at: now,
            version: 0,
            unique: None,
            refs: Vec::new(),
            metadata: None,
            data,
        }
    }
}

impl Record {
    /// A new record with a new id and the current time from one [`stamp`]: records
    /// made this way list (by `created_at`, then id) in the order they were made.
    pub fn fresh(kind: Kind, scope: Uuid, data: Value) -> Self {
        let (id, at) = stamp();
        let mut rec = Record::new(kind, id, scope, data);
        rec.created_at = at;
        rec.updated_at = at;
        rec
    }
}

/// The last time [`now`] answered, in µs: the wall clock may step back (NTP), our time does not.
static CLOCK: Mutex<i64> = Mutex::new(i64::MIN);

fn tick(last: &mut i64) -> DateTime<Utc> {
    let t = Utc::now().timestamp_micros().max(*last);
    *last = t;
    DateTime::from_timestamp_micros(t).expect("a time from the clock is representable")
}

/// The current time, truncated to microseconds (what the order index keeps),
/// never earlier than a time answered before in this process.
pub fn now() -> DateTime<Utc> {
    tick(&mut CLOCK.lock().expect("clock lock"))
}

/// A new id: UUIDv7, monotonic within the process, so ids sort by creation.
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}

/// A new id and the current time, taken together: of two stamps, the later one
/// has the greater id and a time no earlier, so ordering by (time, id) is
/// ordering by creation even within one microsecond.
pub fn stamp() -> (Uuid, DateTime<Utc>) {
    let mut last = CLOCK.lock().expect("clock lock");
    let at = tick(&mut last);
    (new_id(), at)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortBy {
    #[default]
    CreatedAt,
    UpdatedAt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Direction {
    Asc,
    #[default]
    Desc,
}

#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    pub limit: usize,
    pub offset: usize,
    pub sort_by: SortBy,
    pub direction: Direction,
    /// Records whose metadata has every key with an equal value.
    pub metadata_filter: Option<Metadata>,
    /// Stop adding records once their stored JSON would pass this many bytes
    /// (the page still has at least one record); `None`: no bound.
    pub max_bytes: Option<usize>,
    /// Only the records after this position in the page's order: the sort
    /// time (`sort_by`'s) and id of a record, usually the last one of the page
    /// before (see [`ListQuery::after_record`]). A cursor: the page starts
    /// there through the index, where an offset would read what it skips.
    pub after: Option<(DateTime<Utc>, Uuid)>,
}

impl ListQuery {
    /// A page of `limit` records from `offset`, oldest first, unfiltered: how
    /// the server itself reads a scope through.
    pub fn oldest_first(offset: usize, limit: usize) -> Self {
        ListQuery {
            limit,
            offset,
            sort_by: SortBy::CreatedAt,
            direction: Direction::Asc,
            ..Default::default()
        }
    }

    /// The position of `record` in this query's order, as [`ListQuery::after`].
    pub fn after_record(mut self, record: &Record) -> Self {
        self.after = Some((record.sort_time(self.sort_by), record.id));
        self
    }
}

/// A precondition for a put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Insert: the id must not exist.
    Absent,
    /// Replace: the record must exist with this version.
    Version(u64),
}

/// One step of an atomic commit.
#[derive(Clone, Debug)]
pub enum Op {
    /// Insert or replace a record (its version is set by the store).
    Put { record: Record, expect: Expect },
    /// Delete a record, which must exist (with this version, when given).
    Delete { kind: Kind, id: Uuid, version: Option<u64> },
    /// Delete every record of `kind` whose scope is `scope`. They are gone for
    /// every read once the commit is; a backend may reclaim their space
    /// afterwards, in the background (the sled one does, in bounded steps).
    DeleteScope { kind: Kind, scope: Uuid },
    /// Fail with `NotFound` unless the record exists.
    Require { kind: Kind, id: Uuid },
    /// Bump a record's version (so concurrent optimistic writers of it retry).
    Touch { kind: Kind, id: Uuid },
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{} {id} not found", kind.name())]
    NotFound { kind: Kind, id: Uuid },
    #[error("a {} named '{name}' already exists", kind.name())]
    Duplicate { kind: Kind, name: String },
    #[error("a {} with id {id} already exists", kind.name())]
    IdTaken { kind: Kind, id: Uuid },
    /// A version precondition failed: re-read and retry.
    #[error("concurrent modification")]
    Stale,
    /// The disk holding the store is full (ENOSPC, EDQUOT): nothing was written.
    /// The message names the directory; writes resume once there is space.
    #[error("{0}")]
    Full(String),
    /// The store cannot write now (another IO failure, a disk that does not
    /// answer, a store being reopened or closed): nothing was written, unless
    /// the message says the outcome is unknown.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (a record that does not decode): a bug or corruption.
    #[error("storage error: {0}")]
    Io(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A change committed to a shared store, as a server hears of it (see
/// [`Store::changes`]): what its caches must forget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A record was written or deleted.
    Record { tenant: Uuid, kind: Kind, id: Uuid, scope: Uuid },
    /// Every record of `kind` in `scope` was deleted.
    Scope { tenant: Uuid, kind: Kind, scope: Uuid },
    /// Changes may have been missed (the connection that hears them was lost
    /// and is back): forget everything cached.
    Unknown,
}

/// What the store is told of the domain's records when it is opened: the
/// store itself names no field of a record's `data` and no listener of its
/// changes. The domain's is `crate::app::records::STORE_DOMAIN`.
#[derive(Clone, Copy, Debug)]
pub struct Domain {
    /// Whether another server acts on hearing this change: a shared store
    /// tells only these (see [`Store::changes`]).
    pub heard: fn(&Change) -> bool,
    /// Where a doc record's `data` keeps what search indexes and answers.
    pub docs: DocLayout,
}

/// The keys of a doc record's `data` (a JSON object) that search reads; a
/// record without them has nothing to search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocLayout {
    /// The title: a string.
    pub title: &'static str,
    /// The snippets: an array of strings.
    pub snippets: &'static str,
    /// The snippets' embeddings, when given: an array of arrays of numbers.
    pub embeddings: &'static str,
}

/// What a search answers of a doc.
#[derive(Clone, Debug, PartialEq)]
pub struct DocParts {
    pub title: String,
    pub metadata: Option<Metadata>,
    /// The snippets at the indexes asked for, in their order (empty past the
    /// doc's end).
    pub snippets: Vec<String>,
}

impl DocParts {
    /// The parts of a whole doc record, its data laid out as `layout` says.
    pub fn of(rec: &Record, indexes: &[usize], layout: &DocLayout) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        DocParts {
            title: text(&rec.data[layout.title]),
            metadata: rec.metadata.clone(),
            snippets: indexes.iter().map(|&i| text(&rec.data[layout.snippets][i])).collect(),
        }
    }
}

/// The storage backend.
///
/// Reads are async too, so that a backend over the network (PostgreSQL) can
/// wait for its database without holding a worker thread.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>>;
    /// A page of the records of `kind` in `scope`, in the order asked for.
    async fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>>;
    /// Ids of records of `kind` that name `target` in their `refs`.
    async fn referencing(&self, tenant: Uuid, kind: Kind, target: Uuid) -> StoreResult<Vec<Uuid>>;
    /// The id holding a unique name in a scope.
    async fn lookup_unique(
        &self,
        tenant: Uuid,
        kind: Kind,
        scope: Uuid,
        name: &str,
    ) -> StoreResult<Option<Uuid>>;
    /// Every record of a kind, across tenants (what a starting server resumes:
    /// execution markers, leases).
    /// Not a snapshot: a record deleted while the scan runs may still be in it.
    async fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>>;

    /// Every record of a kind, across tenants, named only: `(tenant, scope,
    /// id)` (what an index kept beside the store compares itself with at
    /// start, without reading every record).
    async fn scan_ids(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Uuid, Uuid)>> {
        Ok(self.scan_kind(kind).await?.into_iter().map(|(tenant, r)| (tenant, r.scope, r.id)).collect())
    }
    /// Applies all ops atomically, or none; answers once the commit is durable.
    /// Answers [`StoreError::Full`] or [`StoreError::Unavailable`] (nothing
    /// applied) while the store cannot write, and within a bounded time.
    async fn commit(&self, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()>;
    /// Whether the store can write now; the error says why not.
    async fn health(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Whether other processes write to this store too: then nothing a server
    /// keeps in memory is the truth, and work is shared out by leases.
    fn shared(&self) -> bool {
        false
    }
    /// The changes committed by every process writing to a shared store, this
    /// one included, as they are heard (a hint: a change may arrive late, and
    /// [`Change::Unknown`] says some were missed). `None` when no other process writes.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        None
    }

    /// A doc's title, metadata and its snippets at `indexes` (what a search
    /// answers of it), its data laid out as `layout` says, or `None` when
    /// there is no such doc. Backends that can read these without decoding
    /// the whole doc do (sled does).
    async fn doc_parts(
        &self,
        tenant: Uuid,
        id: Uuid,
        indexes: &[usize],
        layout: &DocLayout,
    ) -> StoreResult<Option<DocParts>> {
        Ok(self.get(tenant, Kind::Doc, id).await?.map(|rec| DocParts::of(&rec, indexes, layout)))
    }

    /// Search over the documents, when the store indexes them itself (the
    /// PostgreSQL one does, in the transactions that write them); `None`: the
    /// server keeps the index ([`crate::search::SearchIndex`]).
    fn doc_search(&self) -> Option<&dyn DocSearch> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::stamp;

    #[test]
    fn stamps_taken_concurrently_order_ids_and_times_alike() {
        let threads: Vec<_> =
            (0..8).map(|_| std::thread::spawn(|| (0..20_000).map(|_| stamp()).collect::<Vec<_>>())).collect();
        let mut all: Vec<_> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        all.sort_by_key(|(id, _)| *id);
        for w in all.windows(2) {
            assert!(w[0].1 <= w[1].1, "a greater id never has an earlier time: {w:?}");
        }
    }
}
