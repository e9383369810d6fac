//! The domain: what the service does, independent of HTTP and of the storage backend.
//!
//! Handlers call these functions with validated contract types and a tenant;
//! they read and write through the [`Store`] trait only.

pub mod agents;
pub mod chat;
pub mod keys;
pub mod messages;
pub mod records;
pub mod sessions;
pub mod tasks;
pub mod tools;
pub mod users;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use uuid::Uuid;

use crate::api::error::Issue;
use crate::chat::Providers;
use crate::store::{Kind, Store, StoreError};

/// The tenant of the API key of a request: every query is scoped by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tenant(pub Uuid);

/// A domain error; [`crate::api::ApiError::from_domain`] maps it to HTTP.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("validation failed")]
    Validation(Vec<Issue>),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    UpstreamTimeout(String),
    #[error("{0}")]
    NoModelProvider(String),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn not_found(kind: Kind, id: Uuid) -> Self {
        Error::NotFound(format!("{} {id} not found", kind.name()))
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { kind, id } => Error::not_found(kind, id),
            e @ (StoreError::Duplicate { .. } | StoreError::IdTaken { .. }) => Error::Conflict(e.to_string()),
            StoreError::Stale => {
                Error::Internal("the record kept changing while being updated; try again".into())
            }
            StoreError::Io(m) => Error::Internal(m),
        }
    }
}

/// The application: the store and the settings the domain needs.
#[derive(Clone)]
pub struct App {
    pub store: Arc<dyn Store>,
    /// Key hash → tenant, for keys seen by this process. Keys change only through
    /// this `App` (or the CLI while the server is stopped: the store admits one
    /// process), so the cache is invalidated where keys are revoked.
    key_cache: Arc<RwLock<HashMap<String, Tenant>>>,
    /// The model providers chats go through.
    pub models: Arc<Providers>,
    /// One lock per session with a chat under way, so exchanges do not interleave.
    chat_locks: chat::ChatLocks,
}

impl App {
    /// An application with no model provider (chats answer 503).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_models(store, Providers::none())
    }

    pub fn with_models(store: Arc<dyn Store>, models: Providers) -> Self {
        App { store, key_cache: Arc::default(), models: Arc::new(models), chat_locks: Default::default() }
    }
}
