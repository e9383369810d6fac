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
//! A store tells only the changes someone acts on ([`Change::heard`]): a
//! kind handled here is listed there. Notifications are hints; the time to
//! live of cached keys and the version check of histories are what make the
//! caches right when one is lost.

use std::sync::{Arc, RwLock, Weak};

use tokio::sync::broadcast::error::RecvError;

use super::history::HistoryCache;
use super::keys::KeyCache;
use super::{App, Tenant};
use crate::store::{Change, Kind};

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
