//! Leases: on a shared store (several servers on one database), which server
//! runs an execution or a background response's run (`responses::background`).
//! What follows says "execution"; a run's lease behaves the same.
//!
//! A server runs an execution only while it holds the execution's lease (a
//! [`Kind::ExecutionLease`] record naming the server and when the claim
//! expires). It claims one that nobody holds (insert-if-absent) or whose
//! holder let it expire (replace-if-version), renews it every third of
//! `executions.lease_s`, and stops the run at once when it cannot: the lease
//! went to another server, was released by the execution's end (a cancel
//! elsewhere), or the store did not answer until shortly before the lease
//! would expire. A server that dies thus loses its executions to the others
//! within `lease_s`; the run that takes over replays the committed
//! transitions (a sleep keeps its due time), so no step committed is run
//! again. An execution asleep (outside parallel branches) holds no lease:
//! its run released it, and any server claims it when it is due. Two runs of one execution never both commit in any case (each
//! commit expects the execution record's last version): the lease keeps the
//! second from running at all.
//!
//! The commit that ends an execution, or makes it wait for input, deletes its
//! lease (see `exec::records::commit_ops`): a resume, on any server, then
//! claims it afresh. Every other end of a run releases the lease here.
//!
//! Times in leases are the servers' wall clocks: a holder gives its lease up
//! a quarter of `lease_s` before it expires, so clocks may disagree by that
//! much. On an unshared store (sled) there are no leases: the one process
//! runs everything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::Tenant;
use super::executions::stored::read;
use crate::store::{Expect, Kind, Op, Record, Store, StoreError, StoreResult, now};

/// A lease's stored fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LeaseData {
    /// The server holding it (see [`Leases::server`]).
    pub holder: Uuid,
    /// Until when; another server may take it over afterwards.
    pub expires_at: DateTime<Utc>,
}

/// What this server knows of leases: who it is, and for how long it claims.
pub struct Leases {
    /// This server's id, new at every start: leases of a server that stopped
    /// without releasing them are no one's once they expire.
    pub server: Uuid,
    /// How long a claim lasts (`executions.lease_s`).
    pub lease: Duration,
}

/// A lease this server holds.
pub struct Held {
    pub tenant: Tenant,
    /// As last written (its version is [`Held::version`]).
    record: parking_lot::Mutex<Record>,
    version: AtomicU64,
    /// When the claim was sent: it lasts `lease` from then, at most.
    claimed: Instant,
    /// Woken when the store says the lease changed (another server took it, or released it).
    pub wake: Arc<Notify>,
    /// The lease this claim took over: another server's, expired.
    pub took_over: Option<LeaseData>,
}

impl Held {
    pub fn id(&self) -> Uuid {
        self.record.lock().id
    }

    /// The kind of the lease record ([`Kind::ExecutionLease`], [`Kind::RunLease`]).
    fn kind(&self) -> Kind {
        self.record.lock().kind
    }
}

/// Why a held lease ended.
#[derive(Debug)]
pub enum Lost {
    /// Another server holds it now.
    TakenOver { by: Uuid },
    /// It was deleted: the execution ended (or waits for input) by a commit elsewhere.
    Released,
    /// It could not be renewed before it would expire.
    Unreachable(StoreError),
}

/// What a claim found.
pub enum Claim {
    /// This server holds the lease: run the execution.
    Held(Arc<Held>),
    /// Nothing to run (gone, ended, or waiting for input).
    Nothing,
    /// Another server holds a live lease: it runs the execution.
    Busy { holder: Uuid, expires_at: DateTime<Utc> },
}

impl Leases {
    pub fn new(lease_s: u64) -> Self {
        Leases { server: Uuid::new_v4(), lease: Duration::from_secs(lease_s.max(1)) }
    }

    /// How often a held lease is renewed, and leases are looked for.
    pub fn period(&self) -> Duration {
        self.lease / 3
    }

    /// How long before the expiry this server gives a lease up when it could
    /// not renew it: the margin for clocks that disagree.
    fn margin(&self) -> Duration {
        self.lease / 4
    }

    /// How long a failed renewal waits before it tries again.
    fn retry(&self) -> Duration {
        (self.lease / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    fn expiry(&self) -> DateTime<Utc> {
        now() + chrono::Duration::from_std(self.lease).unwrap_or(chrono::Duration::seconds(15))
    }

    fn data(&self) -> serde_json::Value {
        serde_json::to_value(LeaseData { holder: self.server, expires_at: self.expiry() })
            .expect("a lease serialises")
    }

    /// Claims a lease of `kind` on `id` (in `scope`) that nobody holds, that
    /// expired, or that is this server's already (a run of it starting again here).
    pub async fn claim_of(
        &self,
        store: &dyn Store,
        tenant: Tenant,
        kind: Kind,
        (id, scope): (Uuid, Uuid),
    ) -> StoreResult<Claim> {
        let current = store.get(tenant.0, kind, id).await?;
        if let Some(rec) = &current {
            let lease = lease_of(rec);
            if lease.holder != self.server && lease.expires_at >= now() {
                return Ok(Claim::Busy { holder: lease.holder, expires_at: lease.expires_at });
            }
        }
        self.take(store, tenant, kind, (id, scope), current).await
    }

    /// Writes this server's claim over `current` (none: a new lease).
    async fn take(
        &self,
        store: &dyn Store,
        tenant: Tenant,
        kind: Kind,
        (id, scope): (Uuid, Uuid),
        current: Option<Record>,
    ) -> StoreResult<Claim> {
        let took_over = current.as_ref().map(lease_of).filter(|lease| lease.holder != self.server);
        let (record, expect) = match current {
            None => (Record::new(kind, id, scope, self.data()), Expect::Absent),
            Some(mut rec) => {
                let expect = Expect::Version(rec.version);
                rec.data = self.data();
                rec.updated_at = now().max(rec.created_at);
                (rec, expect)
            }
        };
        let claimed = Instant::now();
        let version = match expect {
            Expect::Absent => 0,
            Expect::Version(v) => v + 1,
        };
        match store.commit(tenant.0, vec![Op::Put { record: record.clone(), expect }]).await {
            Ok(()) => Ok(Claim::Held(Arc::new(Held {
                tenant,
                record: parking_lot::Mutex::new(record),
                version: AtomicU64::new(version),
                claimed,
                wake: Arc::default(),
                took_over,
            }))),
            // Another server claimed it first: it runs the execution.
            Err(StoreError::IdTaken { .. } | StoreError::Stale | StoreError::NotFound { .. }) => {
                match store.get(tenant.0, kind, id).await? {
                    Some(rec) => {
                        let lease = lease_of(&rec);
                        Ok(Claim::Busy { holder: lease.holder, expires_at: lease.expires_at })
                    }
                    None => Ok(Claim::Nothing),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Keeps `held` renewed; answers only when it is lost (the run must stop).
    pub async fn keep(&self, store: &dyn Store, held: &Held) -> Lost {
        let mut deadline = held.claimed + self.lease - self.margin();
        let mut next = held.claimed + self.period();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = held.wake.notified() => {
                    // The store says the lease changed: still ours?
                    match tokio::time::timeout_at(deadline, store.get(held.tenant.0, held.kind(), held.id())).await {
                        Ok(Ok(None)) => return Lost::Released,
                        Ok(Ok(Some(rec))) if lease_of(&rec).holder != self.server => {
                            return Lost::TakenOver { by: lease_of(&rec).holder };
                        }
                        _ => continue,
                    }
                }
            }
            let sent = Instant::now();
            if sent >= deadline {
                return Lost::Unreachable(StoreError::Unavailable(format!(
                    "the lease could not be renewed within {} s",
                    (self.lease - self.margin()).as_secs_f64()
                )));
            }
            let (record, expect) = {
                let mut rec = held.record.lock();
                rec.data = self.data();
                rec.updated_at = now().max(rec.created_at);
                (rec.clone(), Expect::Version(held.version.load(Ordering::Relaxed)))
            };
            let renewed = tokio::time::timeout_at(
                deadline,
                store.commit(held.tenant.0, vec![Op::Put { record, expect }]),
            )
            .await;
            match renewed {
                Ok(Ok(())) => {
                    held.version.fetch_add(1, Ordering::Relaxed);
                    deadline = sent + self.lease - self.margin();
                    next = sent + self.period();
                }
                Ok(Err(StoreError::NotFound { .. })) => return Lost::Released,
                Ok(Err(StoreError::Stale)) => {
                    return match store.get(held.tenant.0, held.kind(), held.id()).await {
                        Ok(Some(rec)) => Lost::TakenOver { by: lease_of(&rec).holder },
                        Ok(None) => Lost::Released,
                        // Someone else wrote it: whoever it is, it is no longer ours.
                        Err(_) => Lost::TakenOver { by: Uuid::nil() },
                    };
                }
                Ok(Err(e)) => {
                    if Instant::now() + self.retry() >= deadline {
                        return Lost::Unreachable(e);
                    }
                    next = Instant::now() + self.retry();
                }
                Err(_) => {
                    return Lost::Unreachable(StoreError::Unavailable(format!(
                        "the store did not answer a renewal of the lease within {} s",
                        (self.lease - self.margin()).as_secs_f64()
                    )));
                }
            }
        }
    }

    /// Gives `held` up (the run ended without a commit deleting it), if it is
    /// still this server's. Best effort: a lease left behind expires.
    pub async fn release(&self, store: &dyn Store, held: &Held) -> StoreResult<()> {
        let id = held.id();
        let Some(rec) = store.get(held.tenant.0, held.kind(), id).await? else { return Ok(()) };
        // The holder is checked, not only the version: a lease deleted by an
        // execution's commit and claimed anew by another server starts at version 0 again.
        if lease_of(&rec).holder != self.server {
            return Ok(());
        }
        let delete = Op::Delete { kind: held.kind(), id, version: Some(rec.version) };
        match store.commit(held.tenant.0, vec![delete]).await {
            Ok(()) | Err(StoreError::NotFound { .. } | StoreError::Stale) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A lease's fields; an unreadable one counts as expired and no one's.
pub fn lease_of(rec: &Record) -> LeaseData {
    read(rec).unwrap_or(LeaseData { holder: Uuid::nil(), expires_at: DateTime::<Utc>::MIN_UTC })
}
