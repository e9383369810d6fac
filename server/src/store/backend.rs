//! The store the configuration chose: sled in a data directory, or PostgreSQL
//! at a URL. What the server does at start and stop that differs between them.

use std::sync::Arc;

use super::Store;
use super::pg_store::PgStore;
use super::sled_store::SledStore;

/// An open store of either backend.
#[derive(Clone)]
pub enum Backend {
    Sled(Arc<SledStore>),
    Postgres(Arc<PgStore>),
}

impl Backend {
    /// The store, for the application.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Backend::Sled(s) => s.clone(),
            Backend::Postgres(s) => s.clone(),
        }
    }

    /// Whether the store is new (it never held a record before this start): the
    /// server then creates a first API key.
    pub fn is_new(&self) -> bool {
        match self {
            Backend::Sled(s) => s.opened().is_new(),
            Backend::Postgres(s) => s.is_new(),
        }
    }

    /// Closes the store; false when it could not be closed cleanly (the sled
    /// store's disk did not answer).
    pub fn close(&self) -> bool {
        match self {
            Backend::Sled(s) => s.close(),
            Backend::Postgres(s) => {
                s.close();
                true
            }
        }
    }
}
