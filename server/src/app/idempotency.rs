//! Idempotency keys: a POST sent again with the same `Idempotency-Key` answers
//! what the first one answered, without doing it again.
//!
//! A key's record ([`Kind::Idempotency`], in the caller's tenant, its id derived
//! from the key) holds a fingerprint of the request (method, path, body), the
//! answer's status and JSON body, and its time. Its life:
//!
//! - [`App::idempotency_begin`] queues the requests of one (tenant, key) on an
//!   in-process lock (a second one waits for the first's answer, at most
//!   [`IN_PROGRESS_WAIT`], else a 409 saying a request with this key is in
//!   progress), then reads the record: the same request replays its answer,
//!   another request with the key is a 409, no record (or one older than
//!   [`LIFETIME`]) gives a [`Claim`].
//! - The request runs with the claim in a task-local ([`Claim::scope`]). A write
//!   commits through [`App::commit_answering`], which adds the key's record with
//!   the answer to the SAME atomic commit: the write and its remembered answer
//!   land together or not at all, so no crash can leave a write whose retry
//!   writes again. (The record is put with an insert-if-absent precondition, so
//!   even two processes could not both write for one key.)
//! - A request that wrote nothing that way (a search, a chat with `save: false`,
//!   a key creation, whose commit is in the system tenant) has its answer saved
//!   by [`App::idempotency_save`] after it answered; nothing else was written,
//!   so there is no window to lose a write in — except for `POST /api/keys`,
//!   whose key is committed first: a crash between the two commits lets a retry
//!   create a second key.
//! - A streamed answer (a chat, a `/v1` response) saves its turn with a
//!   placeholder answer in the same commit, keeps the key's lock while it
//!   streams (a repeat meanwhile waits, then is a 409), and once the stream
//!   has ended well [`App::idempotency_remember_stream`] replaces the
//!   placeholder with the events sent, which a repeat gets again. A repeat
//!   finding the placeholder (the server stopped mid-stream, or the stream
//!   was too long to keep) is a 409 saying where the answer was saved.
//! - Failures (4xx, 5xx) are not remembered: a failed request leaves the store
//!   as it was, so running its retry again is right (and replaying a 5xx would
//!   make retrying useless).
//!
//! Records older than [`LIFETIME`] count as absent: the next use of their key
//! deletes it, then claims the key anew; [`App::sweep_idempotency`] deletes a tenant's expired
//! records a few at a time, oldest first, after each new keyed request, so they
//! do not pile up while the tenant keeps sending keyed requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::locks::KeyedGuard;
use super::{App, Error, Result, Tenant};
use crate::store::{Expect, Kind, ListQuery, Op, Record, StoreError, StoreResult, now};

/// How long a key's answer is remembered.
pub const LIFETIME: chrono::TimeDelta = chrono::TimeDelta::hours(24);
/// How long a request waits for another one with its key to finish.
pub const IN_PROGRESS_WAIT: Duration = Duration::from_secs(10);
/// How many expired records one sweep looks at.
const SWEEP_BATCH: usize = 16;

/// What a key's record remembers of the first request's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Remembered {
    /// The status and the JSON body, byte for byte.
    Answer { status: u16, body: String },
    /// An answer that must not be stored (it carries a secret), or a stream
    /// that could not be kept: a repeat is a 409 with this explanation.
    Withheld { detail: String },
    /// A streamed answer (`text/event-stream`): its events as sent, byte for
    /// byte, sent again to a repeat.
    Stream { events: String },
}

/// The most bytes of events a streamed answer keeps to send again; a longer
/// stream's repeat is a 409 saying where its answer is.
pub const MAX_STREAM_REMEMBERED: usize = 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct IdempotencyData {
    key: String,
    /// Hex SHA-256 of the method, the path and the body.
    fingerprint: String,
    /// `METHOD /path`, to name it in a 409.
    request: String,
    answer: Remembered,
}

/// The fingerprint of a request: what "the same request" means.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    for part in [method.as_bytes(), path.as_bytes(), body] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    hex::encode(h.finalize())
}

/// The record id of a key in a tenant (the tenant is in the store's key).
fn record_id(key: &str) -> Uuid {
    let digest = Sha256::digest([b"idempotency-key\0".as_slice(), key.as_bytes()].concat());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(bytes)
}

/// The right to run a keyed request and remember its answer.
pub struct Claim {
    tenant: Tenant,
    id: Uuid,
    key: String,
    fingerprint: String,
    request: String,
    /// The success status the request answers (the answer's status when saved).
    status: u16,
    saved: AtomicBool,
    /// The request answers a stream: its write remembers a placeholder, which
    /// [`App::idempotency_remember_stream`] replaces with the events once sent.
    streamed: AtomicBool,
}

tokio::task_local! {
    static CLAIM: Arc<Claim>;
}

/// What [`App::idempotency_begin`] found.
pub enum Begun {
    /// The same request was answered before: answer this.
    Replay(Remembered),
    /// Run the request under this claim, holding the guard until it has answered.
    Fresh(Arc<Claim>, KeyedGuard<(Tenant, Uuid)>),
}

impl Claim {
    /// Runs `fut` with this claim visible to [`App::commit_answering`].
    pub async fn scope<F: Future>(self: &Arc<Self>, fut: F) -> F::Output {
        CLAIM.scope(self.clone(), fut).await
    }

    /// Runs `fut` with no claim visible to [`App::commit_answering`], for a
    /// request made of several commits (an Agent File's import): none of its
    /// commits remembers its own answer as the request's; the request's answer
    /// is remembered once it is known ([`App::idempotency_save`], by the
    /// caller that holds the claim).
    pub async fn hidden<F: Future>(fut: F) -> F::Output {
        let Ok(claim) = CLAIM.try_with(Arc::clone) else { return fut.await };
        let spent = Claim {
            tenant: claim.tenant,
            id: claim.id,
            key: claim.key.clone(),
            fingerprint: claim.fingerprint.clone(),
            request: claim.request.clone(),
            status: claim.status,
            saved: true.into(),
            streamed: false.into(),
        };
        CLAIM.scope(Arc::new(spent), fut).await
    }

    /// True once the answer is in the store.
    pub fn saved(&self) -> bool {
        self.saved.load(Ordering::SeqCst)
    }

    /// Marks the request as answering a stream (see [`Claim::streamed`]).
    pub fn answers_a_stream(&self) {
        self.streamed.store(true, Ordering::SeqCst);
    }

    /// What a repeat is told while the stream's events are not remembered
    /// (the server stopped before the stream ended, or it was too long to keep).
    fn stream_placeholder(&self) -> Remembered {
        Remembered::Withheld {
            detail: format!(
                "a streamed {} with the Idempotency-Key '{}' was answered, and its turn saved, \
                 within the last 24 hours, but its stream was not kept to be sent again (it \
                 was longer than {MAX_STREAM_REMEMBERED} bytes, or the server stopped while \
                 sending it): read the answer where it was saved (the session's messages, or \
                 the response); send a new request with a new key to ask again",
                self.request, self.key
            ),
        }
    }

    fn record_op(&self, answer: Remembered) -> StoreResult<Op> {
        let data = IdempotencyData {
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
            request: self.request.clone(),
            answer,
        };
        let data = serde_json::to_value(data).map_err(|e| StoreError::Io(e.to_string()))?;
        // Insert-if-absent: two requests with one key can never both write.
        let record = Record::new(Kind::Idempotency, self.id, Uuid::nil(), data);
        Ok(Op::Put { record, expect: Expect::Absent })
    }
}

impl App {
    /// Queues behind the requests with this key, then finds what to do (see the module docs).
    pub async fn idempotency_begin(
        &self,
        t: Tenant,
        key: &str,
        request: String,
        fingerprint: String,
        status: u16,
    ) -> Result<Begun> {
        let id = record_id(key);
        let guard = tokio::time::timeout(IN_PROGRESS_WAIT, self.idempotency_locks.lock((t, id)))
            .await
            .map_err(|_| {
                Error::Conflict(format!(
                    "a request with the Idempotency-Key '{key}' is still in progress; \
                     send this one again once it has answered"
                ))
            })?;
        if let Some(rec) = self.store.get(t.0, Kind::Idempotency, id).await? {
            let data: IdempotencyData = serde_json::from_value(rec.data)
                .map_err(|e| Error::Internal(format!("stored idempotency key {id} is unreadable: {e}")))?;
            if rec.created_at + LIFETIME < now() || data.key != key {
                // Expired (or, against all odds, another key's hash): delete it
                // first, so the claim's record is a plain insert. A sweep may have
                // deleted it meanwhile; then it is gone all the same.
                let delete = Op::Delete { kind: Kind::Idempotency, id, version: Some(rec.version) };
                match self.store.commit(t.0, vec![delete]).await {
                    Ok(()) | Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            } else if data.fingerprint != fingerprint {
                return Err(Error::Conflict(format!(
                    "the Idempotency-Key '{key}' was used within the last 24 hours for another request \
                     ({} with another body, or another route); send a new request with a new key",
                    data.request
                )));
            } else {
                return Ok(Begun::Replay(data.answer));
            }
        }
        let claim = Claim {
            tenant: t,
            id,
            key: key.to_owned(),
            fingerprint,
            request,
            status,
            saved: false.into(),
            streamed: false.into(),
        };
        Ok(Begun::Fresh(Arc::new(claim), guard))
    }

    /// Commits `ops` atomically, with — when the request being served holds a
    /// [`Claim`] of this tenant not used yet — the key's record answering
    /// `answer()` (the request's success body) in the same commit. `answer`
    /// is called only then: a request without a key does not build it.
    pub async fn commit_answering<A: Serialize>(
        &self,
        t: Tenant,
        mut ops: Vec<Op>,
        answer: impl FnOnce() -> Option<A>,
    ) -> StoreResult<()> {
        let claim = CLAIM.try_with(Arc::clone).ok().filter(|c| c.tenant == t && !c.saved());
        let remembered = match &claim {
            None => None,
            // A stream's turn: its events are remembered once they are sent.
            Some(claim) if claim.streamed.load(Ordering::SeqCst) => Some(claim.stream_placeholder()),
            Some(claim) => answer()
                .map(|a| serde_json::to_string(&a))
                .transpose()
                .map_err(|e| StoreError::Io(e.to_string()))?
                .map(|body| Remembered::Answer { status: claim.status, body }),
        };
        if let (Some(claim), Some(remembered)) = (&claim, remembered) {
            ops.push(claim.record_op(remembered)?);
            self.store.commit(t.0, ops).await?;
            claim.saved.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.store.commit(t.0, ops).await
    }

    /// Remembers the answer of a claimed request that wrote nothing through
    /// [`App::commit_answering`]; then sweeps expired records.
    pub async fn idempotency_save(&self, claim: &Claim, answer: Remembered) -> Result<()> {
        if !claim.saved() {
            self.store.commit(claim.tenant.0, vec![claim.record_op(answer)?]).await?;
            claim.saved.store(true, Ordering::SeqCst);
        }
        self.sweep_idempotency(claim.tenant).await;
        Ok(())
    }

    /// Remembers the events of a claimed stream that ended well, in place of
    /// the placeholder its turn was saved with (or as the only record, when it
    /// saved nothing); a stream over [`MAX_STREAM_REMEMBERED`] bytes keeps the
    /// placeholder (or, having saved nothing, runs again when repeated).
    pub async fn idempotency_remember_stream(&self, claim: &Claim, events: String) -> Result<()> {
        if events.len() <= MAX_STREAM_REMEMBERED {
            let mut op = claim.record_op(Remembered::Stream { events })?;
            if let Some(rec) = self.store.get(claim.tenant.0, Kind::Idempotency, claim.id).await?
                && let Op::Put { expect, .. } = &mut op
            {
                *expect = Expect::Version(rec.version);
            }
            self.store.commit(claim.tenant.0, vec![op]).await?;
            claim.saved.store(true, Ordering::SeqCst);
        }
        self.sweep_idempotency(claim.tenant).await;
        Ok(())
    }

    /// Deletes up to [`SWEEP_BATCH`] of the tenant's oldest records once they
    /// have expired. Best effort: a failure leaves them for the next sweep.
    pub async fn sweep_idempotency(&self, t: Tenant) {
        let q = ListQuery::oldest_first(0, SWEEP_BATCH);
        let Ok(oldest) = self.store.list(t.0, Kind::Idempotency, Uuid::nil(), &q).await else { return };
        let cutoff = now() - LIFETIME;
        let ops: Vec<Op> = oldest
            .iter()
            .take_while(|r| r.created_at < cutoff)
            .map(|r| Op::Delete { kind: Kind::Idempotency, id: r.id, version: Some(r.version) })
            .collect();
        if !ops.is_empty() {
            let _ = self.store.commit(t.0, ops).await;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The write and its remembered answer are one commit: no crash can keep one without the other.

    use async_trait::async_trait;

    use super::*;
    use crate::store::Store;
    use crate::store::intercepted::{CommitHook, Intercepted};
    use crate::store::sled_store::{Durability, SledStore};

    /// Records the kinds each commit puts.
    #[derive(Default)]
    struct Recorder {
        commits: parking_lot::Mutex<Vec<Vec<Kind>>>,
    }

    #[async_trait]
    impl CommitHook for Recorder {
        async fn commit(&self, inner: &SledStore, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
            let puts = ops
                .iter()
                .filter_map(|op| match op {
                    Op::Put { record, .. } => Some(record.kind),
                    _ => None,
                })
                .collect();
            self.commits.lock().push(puts);
            inner.commit(tenant, ops).await
        }
    }

    #[tokio::test]
    async fn a_keyed_create_commits_the_record_and_its_answer_together() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SledStore::open(dir.path(), Durability::Flush).unwrap();
        let store = Arc::new(Intercepted { inner, hook: Recorder::default() });
        let app = App::new(store.clone()).await.unwrap();
        let t = Tenant(Uuid::from_u128(7));
        let begin = || {
            let fp = fingerprint("POST", "/api/agents", br#"{"name":"A"}"#);
            app.idempotency_begin(t, "k", "POST /api/agents".into(), fp, 201)
        };

        let Begun::Fresh(claim, queue) = begin().await.unwrap() else { panic!("a new key is fresh") };
        let request = serde_json::from_value(serde_json::json!({"name": "A"})).unwrap();
        let agent = claim.scope(app.agent_create(t, request)).await.unwrap();
        assert!(claim.saved());
        assert_eq!(
            *store.hook.commits.lock(),
            [vec![Kind::Agent, Kind::Idempotency]],
            "one commit, both records"
        );
        drop(queue);

        let Begun::Replay(Remembered::Answer { status, body }) = begin().await.unwrap() else {
            panic!("the same request again is a replay")
        };
        assert_eq!((status, body), (201, serde_json::to_string(&agent).unwrap()));
    }

    /// Stores the record of `key` as the first answer of `POST /api/agents`, made `age` ago.
    async fn remembered(app: &App, t: Tenant, key: &str, age: chrono::TimeDelta) {
        let data = IdempotencyData {
            key: key.into(),
            fingerprint: fingerprint("POST", "/api/agents", b"{}"),
            request: "POST /api/agents".into(),
            answer: Remembered::Answer { status: 201, body: "{}".into() },
        };
        let mut rec =
            Record::new(Kind::Idempotency, record_id(key), Uuid::nil(), serde_json::to_value(data).unwrap());
        rec.created_at = now() - age;
        app.store.commit(t.0, vec![Op::Put { record: rec, expect: Expect::Absent }]).await.unwrap();
    }

    #[test]
    fn idempotency_records_as_stored_by_0_1_0_still_read_and_write_the_same() {
        let fingerprint = fingerprint("POST", "/api/agents", b"{}");
        crate::app::stored::tests::keeps::<IdempotencyData>(serde_json::json!({
            "key": "k", "fingerprint": fingerprint, "request": "POST /api/agents",
            "answer": {"kind": "answer", "status": 201, "body": "{\"id\":1}"}}));
        crate::app::stored::tests::keeps::<IdempotencyData>(serde_json::json!({
            "key": "k", "fingerprint": fingerprint, "request": "POST /api/keys",
            "answer": {"kind": "withheld", "detail": "the answer carried a new key"}}));
    }

    #[tokio::test]
    async fn a_key_older_than_a_day_is_free_again_and_swept() {
        let dir = tempfile::tempdir().unwrap();
        let app = App::new(Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap())).await.unwrap();
        let t = Tenant(Uuid::from_u128(7));
        let other_request = || fingerprint("POST", "/api/users", b"{}");
        remembered(&app, t, "recent", chrono::TimeDelta::hours(23)).await;
        remembered(&app, t, "old", chrono::TimeDelta::hours(25)).await;
        remembered(&app, t, "older", chrono::TimeDelta::hours(26)).await;

        let recent = app.idempotency_begin(t, "recent", "POST /api/users".into(), other_request(), 201).await;
        assert!(matches!(recent, Err(Error::Conflict(_))), "a key of the last 24 hours is taken");
        let old = app.idempotency_begin(t, "old", "POST /api/users".into(), other_request(), 201).await;
        assert!(matches!(old, Ok(Begun::Fresh(..))), "an expired key is free");
        drop(old);

        app.sweep_idempotency(t).await;
        assert!(app.store.get(t.0, Kind::Idempotency, record_id("older")).await.unwrap().is_none(), "swept");
        assert!(app.store.get(t.0, Kind::Idempotency, record_id("recent")).await.unwrap().is_some(), "kept");
    }
}
