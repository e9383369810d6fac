//! Chats on one session, one at a time across servers.
//!
//! Within a server, a session's chats queue on a process-local lock
//! ([`App::chat_lock`]). Where other servers write the store too, the chat
//! that holds that lock then takes the session's lease: a
//! [`Kind::SessionLock`] record (id: the session's) put if absent. It is
//! held until the exchange commits, and released by deleting it in that same
//! commit (see [`App::chat_save`]), so an exchange is saved only while its
//! chat still holds the lease. A chat that ends otherwise (an error, a client
//! gone, `save: false`) deletes it on its own.
//!
//! A lease expires [`LEASE`] after it was last renewed, and its holder renews
//! it while the chat runs, so a server that dies mid-chat holds its sessions
//! up for that long at most: a waiter then takes the lease over with a
//! version precondition. A waiter retries with backoff, woken early by a
//! [`Change`] about the lease, and gives up after [`WAIT_AT_MOST`] with a 409
//! saying a chat is under way in the session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, broadcast, oneshot};
use uuid::Uuid;

use super::records::encode;
use super::{App, Error, Result, Tenant};
use crate::store::{Change, Expect, Kind, Op, Record, Store, StoreError, new_id, now};

/// How long a lease lasts without renewal: how long a dead server's chat
/// holds its session up. (Short in unit tests, so that chats outlast it.)
pub const LEASE: Duration = if cfg!(test) { Duration::from_millis(1500) } else { Duration::from_secs(15) };

/// How often a held lease is renewed: a few times within [`LEASE`].
const RENEW_EVERY: Duration = if cfg!(test) { Duration::from_millis(300) } else { Duration::from_secs(5) };

/// How long a chat waits for another server's chat on its session.
pub const WAIT_AT_MOST: Duration = Duration::from_secs(60);

/// The first and the longest pause between two tries to take a held lease.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// A session lock's stored fields.
#[derive(Serialize, Deserialize)]
struct SessionLockData {
    /// The chat holding it (a fresh id per chat).
    holder: Uuid,
    expires_at: DateTime<Utc>,
}

/// The answer when a chat's lease was taken over before its exchange was saved.
pub(super) fn lost(session: Uuid) -> Error {
    Error::Conflict(format!(
        "the chat in session {session} lost its hold on the session (the database did not answer \
         for over {} s, and a chat through another server went ahead); nothing was saved: send \
         the request again",
        LEASE.as_secs()
    ))
}

/// A held lease on a session (see the module docs). Dropping it releases the
/// lease in the background, unless it was released in a commit.
pub struct SessionLease {
    store: Arc<dyn Store>,
    tenant: Tenant,
    session: Uuid,
    state: Arc<Mutex<LeaseState>>,
    /// Dropped with the lease: stops the renewals.
    _stop_renewing: oneshot::Sender<()>,
}

struct LeaseState {
    /// The lease record's version while held; `None` once lost or released.
    version: Option<u64>,
    /// Set once the lease's release is under way: no more renewals.
    ending: bool,
}

fn lease_record(session: Uuid, holder: Uuid) -> Result<Record> {
    let expires_at = now() + LEASE;
    Ok(Record::new(Kind::SessionLock, session, Uuid::nil(), encode(&SessionLockData { holder, expires_at })?))
}

fn lease_data(rec: &Record) -> Option<SessionLockData> {
    serde_json::from_value(rec.data.clone()).ok()
}

impl App {
    /// The session's lease, where other servers chat too (`None` on a store
    /// only this process writes: its chat lock is enough). Waits for another
    /// server's chat on the session, at most [`WAIT_AT_MOST`].
    pub(super) async fn session_lease(&self, t: Tenant, session: Uuid) -> Result<Option<SessionLease>> {
        if !self.store.shared() {
            return Ok(None);
        }
        let holder = new_id();
        let give_up = Instant::now() + WAIT_AT_MOST;
        // Listened to once the lease is found held (before reading who holds
        // it, so that its release is not missed): most chats never wait.
        let mut changes = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let put = Op::Put { record: lease_record(session, holder)?, expect: Expect::Absent };
            match self.store.commit(t.0, vec![put]).await {
                Ok(()) => return Ok(Some(self.leased(t, session, holder, 0))),
                Err(StoreError::IdTaken { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            if changes.is_none() {
                changes = Some(self.store.changes());
            }
            let Some(held) = self.store.get(t.0, Kind::SessionLock, session).await? else {
                continue; // released since: try again at once
            };
            let expires_at = lease_data(&held).map_or(DateTime::<Utc>::MIN_UTC, |d| d.expires_at);
            let left = (expires_at - now()).to_std().unwrap_or(Duration::ZERO);
            if left.is_zero() {
                // Its server died (or lost the database) mid-chat: take it over.
                let take =
                    Op::Put { record: lease_record(session, holder)?, expect: Expect::Version(held.version) };
                match self.store.commit(t.0, vec![take]).await {
                    Ok(()) => return Ok(Some(self.leased(t, session, holder, held.version + 1))),
                    Err(StoreError::Stale | StoreError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let waited_enough = give_up.saturating_duration_since(Instant::now());
            if waited_enough.is_zero() {
                return Err(Error::Conflict(format!(
                    "a chat is under way in session {session} through another server and did not end \
                     within {} s; send the request again once it has",
                    WAIT_AT_MOST.as_secs()
                )));
            }
            let jitter = Duration::from_millis(rand::random_range(0..=pause.as_millis() as u64 / 2));
            let wait = (pause + jitter).min(left).min(waited_enough);
            wait_for_lease(changes.as_mut().and_then(Option::as_mut), t, session, wait).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    /// A lease just taken at `version`, renewed until released.
    fn leased(&self, t: Tenant, session: Uuid, holder: Uuid, version: u64) -> SessionLease {
        let state = Arc::new(Mutex::new(LeaseState { version: Some(version), ending: false }));
        let (stop_renewing, stopped) = oneshot::channel();
        tokio::spawn(renew(self.store.clone(), t, session, holder, state.clone(), stopped));
        SessionLease { store: self.store.clone(), tenant: t, session, state, _stop_renewing: stop_renewing }
    }
}

/// Waits `at_most`, or less when a change about the session's lease is heard.
async fn wait_for_lease(
    changes: Option<&mut broadcast::Receiver<Change>>,
    t: Tenant,
    session: Uuid,
    at_most: Duration,
) {
    let Some(changes) = changes else {
        tokio::time::sleep(at_most).await;
        return;
    };
    let heard = async {
        loop {
            match changes.recv().await {
                Ok(Change::Record { tenant, kind: Kind::SessionLock, id, .. })
                    if tenant == t.0 && id == session =>
                {
                    return;
                }
                Ok(Change::Unknown) | Err(broadcast::error::RecvError::Lagged(_)) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    let _ = tokio::time::timeout(at_most, heard).await;
}

/// Renews the lease every [`RENEW_EVERY`] until it is released, lost, or dropped.
async fn renew(
    store: Arc<dyn Store>,
    t: Tenant,
    session: Uuid,
    holder: Uuid,
    state: Arc<Mutex<LeaseState>>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RENEW_EVERY) => {}
            _ = &mut stopped => return,
        }
        let mut state = state.lock().await;
        let Some(version) = state.version.filter(|_| !state.ending) else { return };
        let Ok(record) = lease_record(session, holder) else { return };
        let renewed = store.commit(t.0, vec![Op::Put { record, expect: Expect::Version(version) }]).await;
        state.version = match renewed {
            Ok(()) => Some(version + 1),
            // Whether it landed is unknown, or the version moved: the record says.
            Err(_) => match store.get(t.0, Kind::SessionLock, session).await {
                Ok(Some(rec)) if lease_data(&rec).is_some_and(|d| d.holder == holder) => Some(rec.version),
                Ok(_) => None,
                // Unreadable now: try again next time (a stale version is re-read then).
                Err(_) => Some(version),
            },
        };
    }
}

impl SessionLease {
    /// The op that releases the lease in the commit of the exchange; no more
    /// renewals from now on. An error when the lease was lost.
    pub(super) async fn release_op(&self) -> Result<Op> {
        let mut state = self.state.lock().await;
        state.ending = true;
        match state.version {
            Some(version) => {
                Ok(Op::Delete { kind: Kind::SessionLock, id: self.session, version: Some(version) })
            }
            None => Err(lost(self.session)),
        }
    }

    /// The commit with [`SessionLease::release_op`] landed.
    pub(super) async fn released(&self) {
        self.state.lock().await.version = None;
    }

    /// Releases the lease now, when no exchange is saved (the session's next
    /// chat on this server then finds it free, without waiting).
    pub(super) async fn release(&self) {
        release(self.store.as_ref(), self.tenant, self.session, &self.state).await;
    }
}

/// Deletes the lease, if still held. Best effort: a lease not deleted expires.
async fn release(store: &dyn Store, t: Tenant, session: Uuid, state: &Mutex<LeaseState>) {
    let mut state = state.lock().await;
    state.ending = true;
    if let Some(version) = state.version.take() {
        let release = Op::Delete { kind: Kind::SessionLock, id: session, version: Some(version) };
        let _ = store.commit(t.0, vec![release]).await;
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        let (store, t, session, state) = (self.store.clone(), self.tenant, self.session, self.state.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move { release(store.as_ref(), t, session, &state).await });
    }
}
