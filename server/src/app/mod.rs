//! The domain: what the service does, independent of HTTP and of the storage backend.
//!
//! Handlers call these functions with validated contract types and a tenant;
//! they read and write through the [`Store`] trait only.

pub mod agent_file;
pub mod agents;
mod changes;
pub mod chat;
pub mod chat_lock;
pub mod compaction;
pub mod completions;
pub mod conversations;
pub mod docs;
pub mod embedding;
pub mod executions;
pub mod history;
pub mod idempotency;
pub mod keys;
pub mod learning;
pub mod lease;
pub mod locks;
pub mod memory;
pub mod memory_tools;
pub mod messages;
pub mod not_found;
pub mod parts;
pub mod records;
pub mod responses;
pub mod secrets;
pub mod sessions;
#[cfg(test)]
mod shared_tests;
pub mod stored;
pub mod tasks;
pub mod tools;
pub mod turn;
pub mod users;

use std::path::Path;
use std::sync::{Arc, RwLock};

use uuid::Uuid;

pub use self::docs::{SearchStart, SearchState};
pub use self::embedding::Embedder;
pub use self::not_found::NotFound;
use crate::api::error::Issue;
use crate::models::Providers;
use crate::search::SearchIndex;
use crate::store::{Kind, Store, StoreError};

/// The tenant of the API key of a request: every query is scoped by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tenant(pub Uuid);

/// A domain error; [`crate::http::error::api_error`] maps it to HTTP.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("validation failed")]
    Validation(Vec<Issue>),
    #[error("{0}")]
    NotFound(NotFound),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    BadRequest(String),
    /// A request's field (`param`, as OpenAI names one: `input[0].content[1].image_url`) is not
    /// acceptable: a 400 naming it.
    #[error("{param}: {message}")]
    Invalid { param: String, message: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    UpstreamTimeout(String),
    /// The model provider said "too many requests"; `retry_after` is its
    /// `Retry-After` (seconds or an HTTP date), passed on to the client.
    #[error("{message}")]
    RateLimited { message: String, retry_after: Option<String> },
    #[error("{0}")]
    NoModelProvider(String),
    /// The disk holding the store is full: nothing was written.
    #[error("{0}")]
    InsufficientStorage(String),
    /// The store cannot write (or read) now: nothing was written unless the message says otherwise.
    #[error("{0}")]
    StoreUnavailable(String),
    /// The search index is still being built after a start: retry shortly.
    #[error("{0}")]
    SearchWarming(String),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn not_found(kind: Kind, id: Uuid) -> Self {
        Error::NotFound(NotFound::Record { kind, id })
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { kind, id } => Error::not_found(kind, id),
            e @ (StoreError::Duplicate { .. } | StoreError::IdTaken { .. }) => Error::Conflict(e.to_string()),
            // Writers of one record queue (see `records`), so this takes other
            // writers changing it more than RETRIES times during one update: a
            // conflict the client resolves by sending the request again.
            StoreError::Stale => Error::Conflict(
                "the record was changed by other requests while this one was being applied; \
                 send the request again"
                    .into(),
            ),
            StoreError::Full(m) => Error::InsufficientStorage(m),
            StoreError::Unavailable(m) => Error::StoreUnavailable(m),
            StoreError::Io(m) => Error::Internal(m),
        }
    }
}

/// The application: the store, the search index and the caches beside it,
/// and the settings the domain needs. Cheap to clone (everything is shared).
#[derive(Clone)]
pub struct App {
    pub store: Arc<dyn Store>,
    /// Key hash → tenant, for keys seen by this process. Invalidated where this
    /// `App` revokes keys and, on a shared store, by other servers' changes
    /// (and a short time to live): see [`keys`].
    key_cache: Arc<RwLock<keys::KeyCache>>,
    /// The search index of every document in the store (see [`docs`]).
    pub search: Arc<SearchIndex>,
    /// The embedding model, when one is configured (`models.embedding_model`).
    pub embedder: Option<Arc<dyn Embedder>>,
    doc_locks: Arc<docs::OwnerLocks>,
    /// The model providers chats go through.
    pub models: Arc<Providers>,
    /// One lock per session with a chat under way, so exchanges do not interleave.
    chat_locks: locks::KeyedLocks<(Tenant, Uuid)>,
    /// Whether `search` holds every document yet (see [`docs::SearchState`]).
    search_state: Arc<tokio::sync::watch::Sender<SearchState>>,
    /// Owners whose documents a delete changed while the index was being built.
    touched_while_warming: Arc<parking_lot::Mutex<std::collections::HashSet<crate::search::OwnerKey>>>,
    /// Recently chatted sessions' histories, kept exact by every message write
    /// (and, on a shared store, checked against the session's version).
    history: Arc<history::HistoryCache>,
    /// One lock per record being updated: its writers queue (see [`records`]).
    record_locks: locks::KeyedLocks<(Tenant, Kind, Uuid)>,
    /// One lock per idempotency key in use: its requests queue (see [`idempotency`]).
    idempotency_locks: locks::KeyedLocks<(Tenant, Uuid)>,
    /// What runs executions, once the server started it. Weak: the runner
    /// holds the application, and the server holds the runner, so that
    /// stopping the server drops both (and closes the store).
    runner: Arc<std::sync::OnceLock<std::sync::Weak<dyn executions::Runner>>>,
    /// How many API keys a tenant may hold through the API (`server.max_keys_per_tenant`).
    pub max_keys_per_tenant: usize,
    /// The key that seals tenants' secrets (`secrets.key_env`), if one is configured.
    secrets_key: Option<Arc<secrets::SecretsKey>>,
    /// How many tasks follow an execution's transitions for a stream now
    /// (see [`App::transition_followers`]).
    followers: Arc<std::sync::atomic::AtomicUsize>,
    /// What runs the server's tools in turns (see [`turn::tools`]).
    pub tool_runner: Arc<turn::tools::ToolRunner>,
    /// The background responses this server runs (see [`responses::BackgroundRuns`]).
    pub background: Arc<responses::BackgroundRuns>,
    /// The learning jobs this server runs (see [`learning`]).
    pub learning: Arc<learning::Learning>,
}

impl App {
    /// Opens the application on a store, building the search index from it
    /// before answering. It has no model provider (chats answer 503) until
    /// [`App::with_models`].
    pub async fn new(store: Arc<dyn Store>) -> Result<Self> {
        Self::open(store, SearchStart::Now).await
    }

    /// Opens the application on a store, building the search index of an
    /// embedded store as `start` says (see [`App::search_state`]).
    pub async fn open(store: Arc<dyn Store>, start: SearchStart) -> Result<Self> {
        Self::open_in(store, start, None).await
    }

    /// Like [`App::open`], with the search index of an embedded store kept
    /// in `index_dir` (opened, and brought in step with the store, rather
    /// than rebuilt) instead of in memory.
    pub async fn open_in(
        store: Arc<dyn Store>,
        start: SearchStart,
        index_dir: Option<&Path>,
    ) -> Result<Self> {
        let search = match index_dir {
            Some(dir) if !store.shared() && start != SearchStart::Never => {
                let search = SearchIndex::open(dir).map_err(|e| {
                    Error::StoreUnavailable(format!(
                        "the search index in {} cannot be opened: {e}",
                        dir.display()
                    ))
                })?;
                Arc::new(search)
            }
            _ => Arc::new(SearchIndex::new()),
        };
        let app = App {
            search_state: Arc::new(tokio::sync::watch::Sender::new(SearchState::Warming {
                done: 0,
                total: 0,
            })),
            touched_while_warming: Default::default(),
            key_cache: Arc::new(RwLock::new(keys::KeyCache::for_store(store.as_ref()))),
            store,
            search,
            embedder: None,
            doc_locks: Default::default(),
            models: Arc::new(Providers::none()),
            chat_locks: Default::default(),
            history: Default::default(),
            record_locks: Default::default(),
            idempotency_locks: Default::default(),
            runner: Default::default(),
            max_keys_per_tenant: keys::DEFAULT_MAX_KEYS_PER_TENANT,
            secrets_key: None,
            followers: Default::default(),
            tool_runner: Default::default(),
            background: Default::default(),
            learning: Default::default(),
        };
        changes::forget_on_changes(&app);
        docs::start_index(&app, start).await?;
        Ok(app)
    }

    /// Makes `runner` the one that runs this application's executions.
    pub fn install_runner(&self, runner: std::sync::Weak<dyn executions::Runner>) {
        let _ = self.runner.set(runner);
    }

    /// What runs executions (none in the `keys` command, nor once the server stopped).
    pub fn runner(&self) -> Result<Arc<dyn executions::Runner>> {
        self.runner
            .get()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| Error::StoreUnavailable("executions do not run in this process".into()))
    }

    /// Installs an embedding model (see [`embedding`]).
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Installs what runs the server's tools in turns, with its limits.
    pub fn with_tool_runner(mut self, runner: turn::tools::ToolRunner) -> Self {
        self.tool_runner = Arc::new(runner);
        self
    }

    /// Installs the model providers, and the embedding model when they configure one.
    pub fn with_models(mut self, models: Providers) -> Self {
        if let Some(model) = models.embedding_model()
            && let Ok(provider) = models.resolve(model)
        {
            self.embedder = Some(Arc::new(embedding::ProviderEmbedder {
                provider: provider.clone(),
                model: model.to_owned(),
            }));
        }
        self.models = Arc::new(models);
        self
    }
}
