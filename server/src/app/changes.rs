//! What other servers changed, forgotten here: on a shared store, one task
//! per application hears the store's [`Change`]s and drops what they touch
//! from the caches.
//!
//! - API keys and tenants: the key cache is flushed (keys change rarely; the
//!   change names the key's id, the cache is keyed by its hash).
//! - A session's messages deleted (the session was): its cached history goes.
//!   Appends need nothing here: a cached history is checked against its
//!   session's version before each use (see [`super::history`]), and dropping
//!   it on every append would drop it after each of this server's own chats.
//! - [`Change::Unknown`] (changes were missed): everything goes.
//!
//! A store tells only the changes someone acts on ([`heard`]): a kind
//! handled here, by the execution engine or by chats waiting for a session's
//! lock is listed there. Notifications are hints; the time to
//! live of cached keys and the version check of histories are what make the
//! caches right when one is lost.

use std::sync::{Arc, RwLock, Weak};

use tokio::sync::broadcast::error::RecvError;

use super::history::HistoryCache;
use super::keys::KeyCache;
use super::{App, Tenant};
use crate::store::{Change, Kind};

/// Whether another server acts on hearing this change: API keys and
/// tenants (the key cache), a session's messages deleted (its cached
/// history), an execution or its lease written (the engine), a session's
/// chat lock written or released (chats waiting for it). A shared store
/// tells only these; whoever starts listening for another kind adds it here.
///
/// Telling is not free: on PostgreSQL a transaction that notifies holds
/// the database's notification lock until its commit is flushed, so
/// notifying commits are flushed one at a time, where the others share
/// their flushes (creating an agent, appending a message, writing a doc).
pub(super) fn heard(change: &Change) -> bool {
    match change {
        Change::Record { kind, .. } => matches!(
            kind,
            Kind::ApiKey | Kind::Tenant | Kind::Execution | Kind::ExecutionLease | Kind::SessionLock
        ),
        Change::Scope { kind, .. } => matches!(kind, Kind::ApiKey | Kind::Tenant | Kind::Message),
        Change::Unknown => true,
    }
}

/// Starts forgetting on the changes of the application's store, where it has
/// any; the task ends with the store's channel or the application.
pub(super) fn forget_on_changes(app: &App) {
    let Some(mut changes) = app.store.changes() else { return };
    let keys = Arc::downgrade(&app.key_cache);
    let history = Arc::downgrade(&app.history);
    tokio::spawn(async move {
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                Err(RecvError::Lagged(_)) => Change::Unknown,
                Err(RecvError::Closed) => return,
            };
            if !forget(&change, &keys, &history) {
                return;
            }
        }
    });
}

/// Forgets what `change` touches; false once the application is gone.
fn forget(change: &Change, keys: &Weak<RwLock<KeyCache>>, history: &Weak<HistoryCache>) -> bool {
    let (Some(keys), Some(history)) = (keys.upgrade(), history.upgrade()) else { return false };
    let flush_keys = || keys.write().unwrap_or_else(|e| e.into_inner()).forget_all();
    match *change {
        Change::Unknown => {
            flush_keys();
            history.forget_all();
        }
        Change::Record { kind: Kind::ApiKey | Kind::Tenant, .. }
        | Change::Scope { kind: Kind::ApiKey | Kind::Tenant, .. } => flush_keys(),
        Change::Scope { tenant, kind: Kind::Message, scope } => history.forget(Tenant(tenant), scope),
        _ => {}
    }
    true
}
