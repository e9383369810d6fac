//! Documents of agents and users, and searching them.
//!
//! A document is a record of [`Kind::Doc`] whose scope is its owner (an agent
//! or a user). The store is the truth; [`App::search`] is the server's own
//! [`SearchIndex`] (on disk beside the store; in memory for tests), brought in
//! step with the store at start ([`fill_index`], in the background for a
//! server: [`SearchState`]) and updated after each committed create or
//! delete, before the request answers (read your writes).
//!
//! A store that indexes documents itself (PostgreSQL, where other servers
//! write documents too: see [`crate::store::Store::doc_search`]) is searched
//! instead, through the same [`DocSearch`] trait; this server keeps no index
//! then.
//!
//! Keeping the two in step under concurrency: every index change of an owner
//! happens under that owner's lock ([`OwnerLocks`]), and a create applies its
//! index change only if the doc still exists in the store at that moment. A
//! delete (of the doc, or of its owner) commits first and changes the index
//! under the lock afterwards, so whichever of the two takes the lock second
//! sees the other's effect: an index entry is never added after the delete of
//! its doc. Commits themselves are not serialised, so concurrent creates share
//! the store's group commit. A create that carries embeddings holds the lock
//! from its dimension check through its commit, so two documents of different
//! dimensions cannot both get in.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::time::Instant;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::{Resource, decode, encode};
use super::stored::StoredOwnerRole;
use super::{App, Error, Result, Tenant};
use crate::api::error::LocPart;
use crate::api::types::{
    CreateDocRequest, Doc, DocOwner, DocReference, DocSearchResponse, Metadata, OwnerRole, SearchMode,
    SearchRequest, Snippet,
};
use crate::api::validate::{Issues, Source};
use crate::search::{self, DocEntry, IndexChange, OwnerKey, Query, SearchError, SearchIndex, Ticket};
use crate::store::{DocLayout, DocSearch, Expect, Kind, ListQuery, Op, Record, new_id};

/// Where [`DocData`] keeps what search reads, for the store (which names no
/// field of a record's data).
pub const DOC_LAYOUT: DocLayout = DocLayout { title: "title", snippets: "content", embeddings: "embeddings" };

/// A document's stored fields (besides id, owner id = scope, created_at and metadata).
#[derive(Serialize, Deserialize)]
pub struct DocData {
    pub role: StoredOwnerRole,
    pub title: String,
    pub content: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<Vec<Vec<f32>>>,
}

impl Resource for Doc {
    const KIND: Kind = Kind::Doc;
    type Data = DocData;
    fn from_parts(rec: &Record, d: DocData) -> Self {
        Doc {
            id: rec.id,
            owner: DocOwner { id: rec.scope, role: d.role.into() },
            title: d.title,
            content: d.content,
            metadata: rec.metadata.clone().map(Metadata),
            embeddings: d.embeddings,
            created_at: rec.created_at,
        }
    }
}

/// The kind of record an owner of `role` is.
pub(crate) fn owner_kind(role: OwnerRole) -> Kind {
    match role {
        OwnerRole::Agent => Kind::Agent,
        OwnerRole::User => Kind::User,
    }
}

fn owner_key(t: Tenant, owner: DocOwner) -> OwnerKey {
    OwnerKey { tenant: t.0, owner: owner.id }
}

/// Per-owner locks, striped: a fixed set of mutexes, an owner maps to one by hash.
/// Two owners sharing a stripe only wait for each other's (short) index updates.
pub struct OwnerLocks {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

impl Default for OwnerLocks {
    fn default() -> Self {
        OwnerLocks { stripes: (0..64).map(|_| tokio::sync::Mutex::new(())).collect() }
    }
}

impl OwnerLocks {
    fn of(&self, key: OwnerKey) -> &tokio::sync::Mutex<()> {
        &self.stripes[self.stripe(key)]
    }

    /// Which lock is the owner's: several owners' locks are taken in this
    /// order (so two such takers cannot deadlock).
    fn stripe(&self, key: OwnerKey) -> usize {
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        (hash % self.stripes.len() as u64) as usize
    }
}

/// Where this server's search index stands. A store that searches itself
/// (PostgreSQL) is always [`SearchState::Ready`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchState {
    /// Every committed document is in the index.
    Ready,
    /// Being built from the store after a start: `done` of `total` documents
    /// (`total` is 0 while the store is still being read). Searches answer 503
    /// `search_warming` meanwhile; everything else is served.
    Warming { done: usize, total: usize },
    /// Building it failed (a stored document could not be read): searches
    /// answer 503 saying why.
    Failed(String),
}

/// How [`App::open`] builds the search index of an embedded store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchStart {
    /// Before `open` answers (tests, benchmarks).
    Now,
    /// In the background: the server answers at once, searches once it is built.
    Background,
    /// Not at all: a command that never searches (`keys`).
    Never,
}

/// How long a start waits for the index before serving without it.
const WARM_START_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// How long a search waits for an index being built before it answers 503.
const WARMING_SEARCH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Docs analysed per step of a rebuild, off the async workers.
const REBUILD_BATCH: usize = 64;

/// Brings `app.search` in step with the store: every stored document the
/// index lacks is analysed and indexed, every indexed one the store no longer
/// has is removed (documents never change, so their ids say what differs; an
/// index opened from disk after a clean stop needs nothing). Safe beside
/// writers (see the module's docs): each doc goes in under its owner's lock,
/// and a doc whose owner had a delete since this began is read again first,
/// so a deleted doc never comes back; a doc created meanwhile was indexed by
/// its create. Answers how many docs it indexed.
pub(super) async fn fill_index(app: &App) -> Result<usize> {
    let store = app.store.clone();
    let handle = tokio::runtime::Handle::current();
    // sled reads synchronously: not on an async worker.
    let stored = tokio::task::spawn_blocking(move || handle.block_on(store.scan_ids(Kind::Doc)))
        .await
        .map_err(|e| Error::Internal(format!("reading the documents failed: {e}")))??;
    let search = app.search.clone();
    let mut indexed = tokio::task::spawn_blocking(move || search.doc_keys())
        .await
        .map_err(|e| Error::Internal(format!("reading the search index failed: {e}")))?
        .map_err(index_failed)?;
    let mut missing = Vec::new();
    for (tenant, owner, id) in stored {
        let key = OwnerKey { tenant, owner };
        if !indexed.remove(&(key, id)) {
            missing.push((key, id));
        }
    }
    // What is left was deleted from the store after the index last saw it
    // (checked again under the owner's lock: a create may have raced the scan).
    let mut gone = Vec::new();
    for (key, id) in indexed {
        let _guard = app.doc_locks.of(key).lock().await;
        if app.store.get(key.tenant, Kind::Doc, id).await?.is_none() {
            gone.push(IndexChange::Remove(key, id));
        }
        if gone.len() == REBUILD_BATCH {
            let (_, ticket) = app.index_stage(std::mem::take(&mut gone)).await?;
            app.index_commit(ticket).await?;
        }
    }
    if !gone.is_empty() {
        let (_, ticket) = app.index_stage(gone).await?;
        app.index_commit(ticket).await?;
    }
    let total = missing.len();
    app.search_state.send_replace(SearchState::Warming { done: 0, total });
    let mut missing = missing.into_iter();
    let batches = std::iter::from_fn(move || {
        let batch: Vec<(OwnerKey, Uuid)> = missing.by_ref().take(REBUILD_BATCH).collect();
        (!batch.is_empty()).then_some(batch)
    });
    // Reading and analysing the docs is most of the work: on every core, in
    // order, while this task puts the analysed docs in.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut analysed = futures::stream::iter(batches)
        .map(|batch| {
            let store = app.store.clone();
            let handle = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                let mut out = Vec::with_capacity(batch.len());
                for (key, id) in batch {
                    // Gone since the scan: its delete has seen to the index.
                    let Some(rec) = handle.block_on(store.get(key.tenant, Kind::Doc, id))? else { continue };
                    out.push((key, id, SearchIndex::prepare(stored_entry(rec)?)));
                }
                Ok::<_, Error>(out)
            })
        })
        .buffered(cores);
    let mut done = 0;
    while let Some(prepared) = analysed.next().await {
        let prepared =
            prepared.map_err(|e| Error::Internal(format!("indexing the documents failed: {e}")))??;
        // A batch goes in under the locks of its owners, in one commit.
        let mut owners: Vec<OwnerKey> = prepared.iter().map(|(key, _, _)| *key).collect();
        owners.sort_unstable_by_key(|key| app.doc_locks.stripe(*key));
        owners.dedup_by_key(|key| app.doc_locks.stripe(*key));
        let mut guards = Vec::with_capacity(owners.len());
        for key in &owners {
            guards.push(app.doc_locks.of(*key).lock().await);
        }
        let mut changes = Vec::with_capacity(prepared.len());
        for (key, id, doc) in prepared {
            let touched = app.touched_while_warming.lock().contains(&key);
            if touched && app.store.get(key.tenant, Kind::Doc, id).await?.is_none() {
                continue;
            }
            changes.push(IndexChange::Upsert(key, doc));
        }
        done += changes.len();
        // Lenient: fails only when the index cannot be written.
        let (_, ticket) = app.index_stage(changes).await?;
        drop(guards);
        app.index_commit(ticket).await?;
        app.search_state.send_replace(SearchState::Warming { done, total });
    }
    Ok(done)
}

/// The index's own failure (its files), as an error of the server.
fn index_failed(e: SearchError) -> Error {
    Error::StoreUnavailable(format!("search is unavailable: {e}"))
}

/// Builds the index as `start` says; `app.search_state` follows it.
pub(super) async fn start_index(app: &App, start: SearchStart) -> Result<()> {
    if app.store.shared() {
        return Ok(());
    }
    match start {
        SearchStart::Never => {
            app.search_state.send_replace(SearchState::Failed("search is not served by this command".into()));
        }
        SearchStart::Now => {
            fill_index(app).await?;
            app.search_ready();
        }
        SearchStart::Background => {
            let builder = app.clone();
            tokio::spawn(async move {
                match fill_index(&builder).await {
                    Ok(_) => builder.search_ready(),
                    Err(e) => {
                        builder.search_state.send_replace(SearchState::Failed(e.to_string()));
                    }
                }
            });
            // A small store's index is ready before the server listens.
            let _ = tokio::time::timeout(WARM_START_WAIT, app.search_settled()).await;
        }
    }
    Ok(())
}

/// What search knows of a stored doc.
fn stored_entry(rec: Record) -> Result<DocEntry> {
    let data: DocData = serde_json::from_value(rec.data)
        .map_err(|e| Error::Internal(format!("stored doc {} is unreadable: {e}", rec.id)))?;
    Ok(DocEntry { id: rec.id, snippets: data.content, embeddings: data.embeddings, metadata: rec.metadata })
}

/// A 422 for one field of the request body.
fn body_issue(path: &[LocPart], kind: &str, msg: impl Into<String>) -> Error {
    let mut issues = Issues::new(Source::Body);
    issues.push(path, kind, msg);
    Error::Validation(issues.into_vec())
}

fn embeddings_loc(i: usize) -> [LocPart; 2] {
    [LocPart::Key("embeddings".into()), LocPart::Index(i)]
}

fn dimension_issue(owner: DocOwner, expected: usize, got: usize) -> Error {
    body_issue(
        &embeddings_loc(0),
        "value_error",
        format!(
            "the vectors have dimension {got} but the {} {}'s documents have dimension {expected}: \
             all vectors of one owner have one dimension",
            owner_kind(owner.role).name(),
            owner.id
        ),
    )
}

impl App {
    /// 404 unless the owner exists in the tenant.
    async fn require_owner(&self, t: Tenant, owner: DocOwner) -> Result<()> {
        self.load(t, owner_kind(owner.role), owner.id).await.map(|_| ())
    }

    pub async fn doc_create(&self, t: Tenant, owner: DocOwner, req: CreateDocRequest) -> Result<Doc> {
        self.require_owner(t, owner).await?;
        let content = req.content.into_vec();
        let embeddings = match (req.embeddings, &self.embedder) {
            (Some(e), _) => Some(e),
            (None, Some(model)) => Some(self.embed_snippets(model.as_ref(), &content).await?),
            (None, None) => None,
        };
        let id = new_id();
        let data = DocData { role: owner.role.into(), title: req.title, content, embeddings };
        let entry = DocEntry {
            id,
            snippets: data.content.clone(),
            embeddings: data.embeddings.clone(),
            metadata: req.metadata.clone().map(Metadata::into_inner),
        };
        let dim = data.embeddings.as_ref().and_then(|e| e.first()).map(Vec::len);
        let mut rec = Record::new(Kind::Doc, id, owner.id, encode(&data)?);
        rec.metadata = req.metadata.map(Metadata::into_inner);
        let answer = decode::<Doc>(&rec)?;

        let embeddings_issue =
            |e: SearchError| body_issue(&[LocPart::Key("embeddings".into())], "value_error", e.to_string());
        let key = owner_key(t, owner);
        if self.store.shared() {
            // The store indexes the doc in its commit: here only the
            // embeddings are checked, and their dimension against the owner's
            // (two servers creating docs of different dimensions at once may
            // both get in; the index then leaves out the vectors of the second).
            SearchIndex::validate(&entry).map_err(embeddings_issue)?;
            if let Some(got) = dim
                && let Some(expected) = self.searcher().owner_dimension(key).await?.filter(|d| *d != got)
            {
                return Err(dimension_issue(owner, expected, got));
            }
            let ops = vec![
                Op::Put { record: rec, expect: Expect::Absent },
                Op::Require { kind: owner_kind(owner.role), id: owner.id },
            ];
            self.commit_answering(t, ops, || Some(&answer)).await?;
            return Ok(answer);
        }

        // Text analysis is the expensive part: do it off the async workers, before any lock.
        let prepared = tokio::task::spawn_blocking(move || SearchIndex::prepare_strict(entry))
            .await
            .map_err(|e| Error::Internal(format!("indexing a doc failed: {e}")))?
            .map_err(embeddings_issue)?;
        let lock = self.doc_locks.of(key);
        // With vectors, hold the owner's lock from the dimension check through the commit.
        let early = match dim {
            Some(got) => {
                let guard = lock.lock().await;
                // Until the index is built it may not know the owner's stored docs yet.
                let expected = match self.search.dimension(key) {
                    None if self.search_state() != SearchState::Ready => {
                        self.stored_dimension(t, owner).await?
                    }
                    known => known,
                };
                if let Some(expected) = expected.filter(|d| *d != got) {
                    return Err(dimension_issue(owner, expected, got));
                }
                Some(guard)
            }
            None => None,
        };
        let ops = vec![
            Op::Put { record: rec, expect: Expect::Absent },
            Op::Require { kind: owner_kind(owner.role), id: owner.id },
        ];
        self.commit_answering(t, ops, || Some(&answer)).await?;
        let _guard = match early {
            Some(g) => g,
            None => lock.lock().await,
        };
        // Deleted (with its owner, or by id) between the commit and now: the
        // delete has already cleaned the index, so add nothing.
        if self.store.get(t.0, Kind::Doc, id).await?.is_none() {
            return Ok(answer);
        }
        // Staged in order under the lock; committed after it (creates of
        // one owner share commits), before the create answers.
        let staged = match self.index_stage(vec![IndexChange::Upsert(key, prepared)]).await {
            Ok((mut outcomes, ticket)) => outcomes.pop().map(|o| (o, ticket)),
            // The doc is stored (so the create answers): the next start
            // indexes it. Until then search says it is unavailable.
            Err(_) => None,
        };
        drop(_guard);
        let upserted = match staged {
            Some((Ok(()), ticket)) => {
                let _ = self.index_commit(ticket).await;
                Ok(())
            }
            Some((Err(e), _)) => Err(e),
            None => Ok(()),
        };
        match upserted {
            Ok(()) => Ok(answer),
            Err(e) => {
                // Unreachable while every index change of this owner holds its lock;
                // if it happens, undo the create rather than keep an unsearchable doc.
                self.store.commit(t.0, vec![Op::Delete { kind: Kind::Doc, id, version: None }]).await?;
                Err(match e {
                    SearchError::DimensionMismatch { expected, got } => dimension_issue(owner, expected, got),
                    e => embeddings_issue(e),
                })
            }
        }
    }

    async fn embed_snippets(&self, model: &dyn super::Embedder, content: &[String]) -> Result<Vec<Vec<f32>>> {
        let vectors = model.embed(content).await?;
        let dims: Vec<usize> = vectors.iter().map(Vec::len).collect();
        if vectors.len() != content.len() || dims.windows(2).any(|w| w[0] != w[1]) || dims.contains(&0) {
            return Err(Error::Upstream(format!(
                "the embedding model answered {} vectors of dimensions {dims:?} for {} snippets",
                vectors.len(),
                content.len()
            )));
        }
        Ok(vectors)
    }

    pub async fn doc_list(&self, t: Tenant, owner: DocOwner, q: &ListQuery) -> Result<Vec<Doc>> {
        self.require_owner(t, owner).await?;
        self.list_resources(t, owner.id, q).await
    }

    /// The doc, if it exists and belongs to `owner` (404 otherwise).
    pub async fn doc_get(&self, t: Tenant, owner: DocOwner, id: Uuid) -> Result<Doc> {
        self.require_owner(t, owner).await?;
        let doc: Doc = self.get_resource(t, id).await?;
        if doc.owner != owner {
            return Err(Error::not_found(Kind::Doc, id));
        }
        Ok(doc)
    }

    /// How many snippets of `owner`'s documents a search ranks.
    pub async fn searchable_snippets(&self, t: Tenant, owner: Uuid) -> Result<usize> {
        self.require_search().await?;
        Ok(self.searcher().owner_snippets(OwnerKey { tenant: t.0, owner }).await?)
    }

    /// Whoever searches documents: the store, when it indexes them itself,
    /// else this server's index.
    fn searcher(&self) -> &dyn DocSearch {
        self.store.doc_search().unwrap_or(self.search.as_ref())
    }

    /// Where the search index stands (always ready where the store searches).
    pub fn search_state(&self) -> SearchState {
        if self.store.shared() {
            return SearchState::Ready;
        }
        self.search_state.borrow().clone()
    }

    /// Follows where the search index stands.
    pub fn watch_search(&self) -> tokio::sync::watch::Receiver<SearchState> {
        self.search_state.subscribe()
    }

    /// Waits until the search index is built or failed, and answers which.
    pub async fn search_settled(&self) -> SearchState {
        let mut rx = self.search_state.subscribe();
        let settled = rx.wait_for(|s| !matches!(s, SearchState::Warming { .. })).await;
        settled.map(|s| s.clone()).unwrap_or_else(|_| self.search_state())
    }

    fn search_ready(&self) {
        self.search_state.send_replace(SearchState::Ready);
        self.touched_while_warming.lock().clear();
    }

    /// 503 unless search can answer: while the index is built after a start
    /// (`search_warming`, retry in a second: a search first waits up to
    /// [`WARMING_SEARCH_WAIT`] for it), or when building it failed.
    async fn require_search(&self) -> Result<()> {
        if matches!(self.search_state(), SearchState::Warming { .. }) {
            let _ = tokio::time::timeout(WARMING_SEARCH_WAIT, self.search_settled()).await;
        }
        match self.search_state() {
            SearchState::Ready => Ok(()),
            SearchState::Warming { done, total } => Err(Error::SearchWarming(if total == 0 {
                "the search index is being built after the server's start (reading the documents); \
                 retry shortly"
                    .into()
            } else {
                format!(
                    "the search index is being built after the server's start ({done} of {total} \
                     documents); retry shortly"
                )
            })),
            SearchState::Failed(why) => Err(Error::StoreUnavailable(format!(
                "search is unavailable: its index could not be built: {why}"
            ))),
        }
    }

    /// While the index is being built, notes that a delete touched `key`'s
    /// documents (the rebuild then re-reads them before indexing). Called
    /// under the owner's lock.
    fn note_delete(&self, key: OwnerKey) {
        if matches!(*self.search_state.borrow(), SearchState::Warming { .. }) {
            self.touched_while_warming.lock().insert(key);
        }
    }

    /// The dimension of the vectors of `owner`'s stored documents, read from
    /// the store (while the index does not know them all yet).
    async fn stored_dimension(&self, t: Tenant, owner: DocOwner) -> Result<Option<usize>> {
        const PAGE: usize = 100;
        let mut q = ListQuery::oldest_first(0, PAGE);
        loop {
            let page = self.store.list(t.0, Kind::Doc, owner.id, &q).await?;
            let last = page.len() < PAGE;
            if let Some(rec) = page.last() {
                q = q.after_record(rec);
            }
            for rec in page {
                let entry = stored_entry(rec)?;
                if let Some(d) = entry.embeddings.as_ref().and_then(|e| e.first()).map(Vec::len) {
                    return Ok(Some(d));
                }
            }
            if last {
                return Ok(None);
            }
        }
    }

    pub async fn doc_delete(&self, t: Tenant, owner: DocOwner, id: Uuid) -> Result<()> {
        self.doc_get(t, owner, id).await?;
        self.store.commit(t.0, vec![Op::Delete { kind: Kind::Doc, id, version: None }]).await?;
        if self.store.shared() {
            return Ok(());
        }
        let key = owner_key(t, owner);
        let _guard = self.doc_locks.of(key).lock().await;
        self.note_delete(key);
        // The delete is stored; a failure has marked search failed (and the
        // next start mends the index).
        if let Ok((_, ticket)) = self.index_stage(vec![IndexChange::Remove(key, id)]).await {
            drop(_guard);
            let _ = self.index_commit(ticket).await;
        }
        Ok(())
    }

    /// Drops an owner's documents from the index, once its deletion (which
    /// deletes them from the store) has committed.
    pub(super) async fn forget_docs_of(&self, t: Tenant, owner: DocOwner) {
        if self.store.shared() {
            return;
        }
        let key = owner_key(t, owner);
        let _guard = self.doc_locks.of(key).lock().await;
        self.note_delete(key);
        // A failure has marked search failed (and the next start mends the index).
        if let Ok((_, ticket)) = self.index_stage(vec![IndexChange::RemoveOwner(key)]).await {
            drop(_guard);
            let _ = self.index_commit(ticket).await;
        }
    }

    /// Stages changes of the index (under their owners' locks), off the
    /// async workers; answers each one's outcome. When the index cannot be
    /// written, search is marked failed: the store has the change, the next
    /// start brings the index in step.
    async fn index_stage(
        &self,
        changes: Vec<IndexChange>,
    ) -> Result<(Vec<std::result::Result<(), SearchError>>, Ticket)> {
        let search = self.search.clone();
        let staged = tokio::task::spawn_blocking(move || search.stage(changes))
            .await
            .map_err(|e| Error::Internal(format!("changing the search index failed: {e}")))?;
        staged.map_err(|e| self.index_broken(e))
    }

    /// Returns once staged changes are searchable (their commit, shared with
    /// everyone who staged meanwhile: called after the owners' locks are let go).
    async fn index_commit(&self, ticket: Ticket) -> Result<()> {
        let search = self.search.clone();
        let committed = tokio::task::spawn_blocking(move || search.commit_through(ticket))
            .await
            .map_err(|e| Error::Internal(format!("committing the search index failed: {e}")))?;
        committed.map_err(|e| self.index_broken(e))
    }

    /// Search answers 503 from now on, saying why; the error to answer.
    fn index_broken(&self, e: SearchError) -> Error {
        self.search_state.send_replace(SearchState::Failed(e.to_string()));
        index_failed(e)
    }

    pub async fn doc_search(
        &self,
        t: Tenant,
        owner: DocOwner,
        req: SearchRequest,
    ) -> Result<DocSearchResponse> {
        let start = Instant::now();
        self.require_owner(t, owner).await?;
        self.require_search().await?;
        let mode = match (req.mode, &req.text, &req.vector) {
            (Some(m), _, _) => m,
            (None, Some(_), Some(_)) => SearchMode::Hybrid,
            (None, None, Some(_)) => SearchMode::Vector,
            _ => SearchMode::Text,
        };
        let needs_vector = matches!(mode, SearchMode::Vector | SearchMode::Hybrid);
        let needs_text = matches!(mode, SearchMode::Text | SearchMode::Hybrid);
        if needs_text && req.text.is_none() {
            return Err(body_issue(&[LocPart::Key("text".into())], "missing", "Field required"));
        }
        let client_vector = req.vector.is_some();
        let vector = match (needs_vector, req.vector, &req.text, &self.embedder) {
            (false, _, _, _) => None,
            (true, Some(v), _, _) => Some(v),
            (true, None, Some(text), Some(model)) => {
                let mut v = model.embed(std::slice::from_ref(text)).await?;
                if v.len() != 1 || v[0].is_empty() {
                    return Err(Error::Upstream(
                        "the embedding model answered no vector for the text".into(),
                    ));
                }
                v.pop()
            }
            (true, None, _, None) => {
                return Err(Error::BadRequest(
                    "a vector or hybrid search needs a `vector`: no embedding model is configured to \
                     embed `text`. Send `vector`, or search with mode `text`"
                        .into(),
                ));
            }
            (true, None, None, Some(_)) => {
                return Err(body_issue(&[], "value_error", "give `text`, `vector` or both"));
            }
        };
        let query = Query {
            text: req.text,
            vector,
            mode: match mode {
                SearchMode::Text => search::Mode::Text,
                SearchMode::Vector => search::Mode::Vector,
                SearchMode::Hybrid => search::Mode::Hybrid,
            },
            limit: req.limit.clamp(1, 100) as usize,
            alpha: req.alpha,
            metadata_filter: req.metadata_filter.map(Metadata::into_inner),
        };
        let hits = self.searcher().search_owner(owner_key(t, owner), &query).await?.map_err(|e| match e {
            SearchError::DimensionMismatch { expected, got } if client_vector => body_issue(
                &[LocPart::Key("vector".into())],
                "value_error",
                format!(
                    "the vector has dimension {got} but the {} {}'s documents have dimension {expected}",
                    owner_kind(owner.role).name(),
                    owner.id
                ),
            ),
            SearchError::DimensionMismatch { expected, got } => Error::Upstream(format!(
                "the embedding model's vectors have dimension {got} but the documents' have {expected}"
            )),
            other => body_issue(&[], "value_error", other.to_string()),
        })?;

        // The index knows ids and positions; titles, snippets and metadata come
        // from the store, each doc read once. A doc deleted since the index was
        // read is skipped.
        let mut wanted: HashMap<Uuid, Vec<usize>> = HashMap::new();
        for hit in &hits {
            wanted.entry(hit.doc_id).or_default().push(hit.snippet_index);
        }
        let mut found = HashMap::with_capacity(wanted.len());
        for (id, indexes) in wanted {
            if let Some(parts) = self.store.doc_parts(t.0, id, &indexes, &DOC_LAYOUT).await? {
                found.insert(id, (indexes, parts));
            }
        }
        let mut docs = Vec::with_capacity(hits.len());
        for hit in hits {
            let Some((indexes, parts)) = found.get_mut(&hit.doc_id) else { continue };
            let at = indexes.iter().position(|&i| i == hit.snippet_index).unwrap_or_default();
            docs.push(DocReference {
                id: hit.doc_id,
                title: parts.title.clone(),
                owner,
                snippet: Snippet {
                    index: hit.snippet_index,
                    content: std::mem::take(&mut parts.snippets[at]),
                },
                score: hit.score,
                metadata: parts.metadata.clone().map(Metadata),
            });
        }
        Ok(DocSearchResponse { docs, time: start.elapsed().as_secs_f64() })
    }
}

#[cfg(test)]
mod tests {
    //! The races between a create's commit and its index update, made
    //! deterministic by a store that pauses right after a doc's commit.

    use std::sync::Arc;

    use async_trait::async_trait;
    use tokio::sync::oneshot;

    use super::*;
    use crate::api::types::DocContent;
    use crate::store::intercepted::{CommitHook, Intercepted};
    use crate::store::sled_store::{Durability, SledStore};
    use crate::store::{Store, StoreResult};

    struct Gate {
        committed: oneshot::Sender<Uuid>,
        release: oneshot::Receiver<()>,
    }

    /// Once armed, the next commit of a new doc reports the doc's id and
    /// waits to be released before it answers.
    #[derive(Default)]
    struct Gated {
        gate: parking_lot::Mutex<Option<Gate>>,
    }

    impl Gated {
        fn arm(&self) -> (oneshot::Receiver<Uuid>, oneshot::Sender<()>) {
            let (committed, on_commit) = oneshot::channel();
            let (release, on_release) = oneshot::channel();
            *self.gate.lock() = Some(Gate { committed, release: on_release });
            (on_commit, release)
        }
    }

    #[async_trait]
    impl CommitHook for Gated {
        async fn commit(&self, inner: &SledStore, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
            let new_doc = ops.iter().find_map(|op| match op {
                Op::Put { record, expect: Expect::Absent } if record.kind == Kind::Doc => Some(record.id),
                _ => None,
            });
            let result = inner.commit(tenant, ops).await;
            if let Some(id) = new_doc {
                let gate = self.gate.lock().take();
                if let Some(Gate { committed, release }) = gate {
                    let _ = committed.send(id);
                    let _ = release.await;
                }
            }
            result
        }
    }

    type GatedStore = Intercepted<Gated>;

    const T: Tenant = Tenant(Uuid::from_u128(1));

    async fn setup() -> (App, Arc<GatedStore>, DocOwner, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let inner = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let store = Arc::new(Intercepted { inner, hook: Gated::default() });
        let app = App::new(store.clone()).await.unwrap();
        let agent = app.agent_create(T, serde_json::from_value(serde_json::json!({"name": "A"})).unwrap());
        let owner = DocOwner { id: agent.await.unwrap().id, role: OwnerRole::Agent };
        (app, store, owner, dir)
    }

    fn request(text: &str, embeddings: Option<Vec<Vec<f32>>>) -> CreateDocRequest {
        CreateDocRequest {
            title: "t".into(),
            content: DocContent::Many(vec![text.into()]),
            metadata: None,
            embeddings,
        }
    }

    fn hits(app: &App, owner: DocOwner, text: &str) -> usize {
        app.search.search(owner_key(T, owner), &Query::text(text)).unwrap().len()
    }

    #[tokio::test]
    async fn a_doc_deleted_between_its_commit_and_its_index_update_stays_out_of_the_index() {
        let (app, store, owner, _dir) = setup().await;
        let (committed, release) = store.hook.arm();
        let create = tokio::spawn({
            let app = app.clone();
            async move { app.doc_create(T, owner, request("racing words", None)).await }
        });
        let id = committed.await.unwrap();
        app.doc_delete(T, owner, id).await.unwrap();
        release.send(()).unwrap();
        create.await.unwrap().unwrap();
        assert_eq!(hits(&app, owner, "racing"), 0);
        assert_eq!(app.search.doc_count(owner_key(T, owner)), 0);
    }

    #[tokio::test]
    async fn a_doc_whose_owner_is_deleted_before_its_index_update_stays_out_of_the_index() {
        let (app, store, owner, _dir) = setup().await;
        let (committed, release) = store.hook.arm();
        let create = tokio::spawn({
            let app = app.clone();
            async move { app.doc_create(T, owner, request("racing words", None)).await }
        });
        let id = committed.await.unwrap();
        app.agent_delete(T, owner.id).await.unwrap();
        release.send(()).unwrap();
        create.await.unwrap().unwrap();
        assert!(app.store.get(T.0, Kind::Doc, id).await.unwrap().is_none());
        assert_eq!(app.search.doc_count(owner_key(T, owner)), 0);
    }

    #[tokio::test]
    async fn the_first_of_two_racing_creates_fixes_the_dimension_and_the_second_is_422() {
        let (app, store, owner, _dir) = setup().await;
        let (committed, release) = store.hook.arm();
        let first = tokio::spawn({
            let app = app.clone();
            async move { app.doc_create(T, owner, request("first", Some(vec![vec![1.0, 0.0]]))).await }
        });
        committed.await.unwrap();
        let second = tokio::spawn({
            let app = app.clone();
            async move { app.doc_create(T, owner, request("second", Some(vec![vec![1.0, 0.0, 0.0]]))).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        release.send(()).unwrap();
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        assert!(first.is_ok(), "{first:?}");
        assert!(matches!(second, Err(Error::Validation(_))), "{second:?}");
        let stored = app.doc_list(T, owner, &ListQuery { limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(app.search.doc_count(owner_key(T, owner)), 1);
        assert_eq!(app.search.dimension(owner_key(T, owner)), Some(2));
    }

    #[tokio::test]
    async fn the_index_is_rebuilt_from_the_store() {
        let (app, _store, owner, _dir) = setup().await;
        let kept = app.doc_create(T, owner, request("kept words", Some(vec![vec![0.5, 0.5]]))).await.unwrap();
        let gone = app.doc_create(T, owner, request("gone words", Some(vec![vec![1.0, 0.0]]))).await.unwrap();
        app.doc_delete(T, owner, gone.id).await.unwrap();
        let rebuilt = App::new(app.store.clone()).await.unwrap();
        assert_eq!(rebuilt.search_state(), SearchState::Ready);
        let key = owner_key(T, owner);
        let found = rebuilt.search.search(key, &Query::text("words")).unwrap();
        assert_eq!(found.iter().map(|h| h.doc_id).collect::<Vec<_>>(), vec![kept.id]);
        assert_eq!(rebuilt.search.dimension(key), Some(2));
    }

    /// Holds back the first `scan_kind` of docs, once armed, after it has read them.
    #[derive(Default)]
    struct ScanGate {
        gate: parking_lot::Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    }

    #[async_trait]
    impl CommitHook for ScanGate {
        async fn commit(&self, inner: &SledStore, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
            inner.commit(tenant, ops).await
        }
        async fn scanned(&self, kind: Kind) {
            let gate = if kind == Kind::Doc { self.gate.lock().take() } else { None };
            if let Some((scanned, release)) = gate {
                let _ = scanned.send(());
                let _ = release.await;
            }
        }
    }

    #[tokio::test]
    async fn while_the_index_is_built_searches_wait_and_writes_keep_it_exact() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let store = Arc::new(Intercepted { inner, hook: ScanGate::default() });
        let first = App::new(store.clone()).await.unwrap();
        let agent = first.agent_create(T, serde_json::from_value(serde_json::json!({"name": "A"})).unwrap());
        let owner = DocOwner { id: agent.await.unwrap().id, role: OwnerRole::Agent };
        let doomed = first.doc_create(T, owner, request("doomed harbour", None)).await.unwrap();
        let kept =
            first.doc_create(T, owner, request("kept harbour", Some(vec![vec![1.0, 0.0]]))).await.unwrap();
        drop(first);

        let (scanned, read) = oneshot::channel();
        let (go, held) = oneshot::channel();
        *store.hook.gate.lock() = Some((scanned, held));
        let app = App::open(store.clone(), SearchStart::Background).await.unwrap();
        read.await.unwrap();
        // The docs are read; none is indexed yet.
        assert!(matches!(app.search_state(), SearchState::Warming { .. }), "{:?}", app.search_state());
        let search = |text: &str| SearchRequest {
            text: Some(text.into()),
            vector: None,
            mode: None,
            limit: 10,
            alpha: 0.5,
            metadata_filter: None,
        };
        let early = app.doc_search(T, owner, search("harbour")).await;
        assert!(matches!(early, Err(Error::SearchWarming(_))), "{early:?}");
        // Everything else is served: a delete of a doc the rebuild has read,
        // a create, and the dimension check (from the store, as the index does
        // not know the stored vectors yet).
        app.doc_delete(T, owner, doomed.id).await.unwrap();
        let new = app.doc_create(T, owner, request("new harbour", None)).await.unwrap();
        let wrong = app.doc_create(T, owner, request("wrong", Some(vec![vec![1.0, 0.0, 0.0]]))).await;
        assert!(matches!(wrong, Err(Error::Validation(_))), "{wrong:?}");

        go.send(()).unwrap();
        assert_eq!(app.search_settled().await, SearchState::Ready);
        let mut found: Vec<Uuid> =
            app.doc_search(T, owner, search("harbour")).await.unwrap().docs.iter().map(|d| d.id).collect();
        found.sort();
        let mut expected = vec![kept.id, new.id];
        expected.sort();
        assert_eq!(found, expected, "the deleted doc came back, or a doc is missing");
        assert_eq!(app.search.doc_count(owner_key(T, owner)), 2, "a deleted doc is in the index");
        assert_eq!(app.search.dimension(owner_key(T, owner)), Some(2));
    }
}

#[cfg(test)]
mod layout_tests {
    use serde_json::json;

    use super::{DOC_LAYOUT, DocData, StoredOwnerRole};

    /// The store reads a doc's title, snippets and embeddings where
    /// [`DOC_LAYOUT`] says: [`DocData`] keeps them there.
    #[test]
    fn the_doc_layout_names_where_doc_data_keeps_its_text() {
        let data = DocData {
            role: StoredOwnerRole::Agent,
            title: "t".into(),
            content: vec!["s".into()],
            embeddings: Some(vec![vec![1.0]]),
        };
        let v = serde_json::to_value(&data).unwrap();
        assert_eq!(v[DOC_LAYOUT.title], json!("t"));
        assert_eq!(v[DOC_LAYOUT.snippets], json!(["s"]));
        assert_eq!(v[DOC_LAYOUT.embeddings], json!([[1.0]]));
    }
}
