//! Shared record plumbing: typed views of records, updates, metadata merge.
//!
//! Updates are read-modify-commit with a version precondition. The writers of
//! one record queue on its in-process lock ([`App::lock_record`]) for the whole
//! cycle, so concurrent updates of one record apply one after the other instead
//! of failing each other's precondition. The precondition stays, for writers
//! that do not take the lock (a session create touches its participants) and
//! other processes: a stale commit is retried [`RETRIES`] times, then answered
//! as a 409 `conflict` saying to send the request again, never a 500.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::locks::KeyedGuard;
use super::{App, Error, Result, Tenant};
use crate::api::error::{Issue, LocPart};
use crate::api::types::{JsonObject, Metadata, metadata_violation};
use crate::store::{Domain, Expect, Kind, ListQuery, Op, Record, StoreError, now};

/// What a store is told of this domain's records when it is opened (see
/// [`Domain`]): which changes another server acts on, and where a doc keeps
/// its title, snippets and embeddings.
pub const STORE_DOMAIN: Domain = Domain { heard: super::changes::heard, docs: super::docs::DOC_LAYOUT };

/// How often an update is retried when a writer outside the queue wrote first.
pub(crate) const RETRIES: usize = 16;

/// A resource stored as a [`Record`]: its kind-specific fields live in `data`.
pub trait Resource: Sized {
    const KIND: Kind;
    /// The kind-specific fields, as stored: made of plain values and the shapes
    /// of [`super::stored`], never of contract types, so that the contract can
    /// change without changing what is on disk.
    type Data: Serialize + DeserializeOwned;
    fn from_parts(rec: &Record, data: Self::Data) -> Self;
}

pub fn decode<R: Resource>(rec: &Record) -> Result<R> {
    Ok(R::from_parts(rec, decode_data::<R>(rec)?))
}

/// The kind-specific fields of a stored record.
pub fn decode_data<R: Resource>(rec: &Record) -> Result<R::Data> {
    // Deserialise from the borrowed value: no copy of the whole tree per read.
    <R::Data as serde::Deserialize>::deserialize(&rec.data)
        .map_err(|e| Error::Internal(format!("stored {} {} is unreadable: {e}", R::KIND.name(), rec.id)))
}

/// A record of another scope (a tool of another agent, ...) is as missing as one that does not exist.
pub fn ensure_scope(rec: &Record, scope: Uuid) -> Result<()> {
    if rec.scope == scope { Ok(()) } else { Err(Error::not_found(rec.kind, rec.id)) }
}

pub fn encode<T: Serialize>(data: &T) -> Result<Value> {
    serde_json::to_value(data).map_err(|e| Error::Internal(e.to_string()))
}

/// Shallow, key-by-key merge of PATCH metadata into stored metadata. The
/// result keeps metadata's bounds: one beyond them is a 422 naming `metadata`.
pub fn merge_metadata(
    stored: Option<JsonObject>,
    patch: Option<Option<Metadata>>,
) -> Result<Option<JsonObject>> {
    match patch {
        None => Ok(stored),
        Some(None) => Ok(None),
        Some(Some(p)) => {
            let mut m = stored.unwrap_or_default();
            for (k, v) in p.into_inner() {
                m.insert(k, v);
            }
            if let Some((kind, msg)) = metadata_violation(&m) {
                return Err(Error::Validation(vec![Issue {
                    loc: vec![LocPart::Key("body".into()), LocPart::Key("metadata".into())],
                    msg: format!(
                        "{msg} once merged into the stored metadata; remove keys (send null to clear it) first"
                    ),
                    kind: kind.into(),
                }]));
            }
            Ok(Some(m))
        }
    }
}

impl App {
    pub async fn load(&self, t: Tenant, kind: Kind, id: Uuid) -> Result<Record> {
        self.store.get(t.0, kind, id).await?.ok_or_else(|| Error::not_found(kind, id))
    }

    /// Loads a record that must belong to `scope` (see [`ensure_scope`]).
    pub async fn load_in(&self, t: Tenant, kind: Kind, scope: Uuid, id: Uuid) -> Result<Record> {
        let rec = self.load(t, kind, id).await?;
        ensure_scope(&rec, scope)?;
        Ok(rec)
    }

    pub async fn get_resource<R: Resource>(&self, t: Tenant, id: Uuid) -> Result<R> {
        decode(&self.load(t, R::KIND, id).await?)
    }

    pub async fn list_resources<R: Resource>(&self, t: Tenant, scope: Uuid, q: &ListQuery) -> Result<Vec<R>> {
        self.store.list(t.0, R::KIND, scope, q).await?.iter().map(decode).collect()
    }

    /// Inserts a new record (plus extra ops in the same atomic commit) and answers
    /// it (remembered with the request's idempotency key, if any).
    pub async fn insert_resource<R: Resource + Serialize>(
        &self,
        t: Tenant,
        rec: Record,
        extra: Vec<Op>,
    ) -> Result<R> {
        self.insert_resource_as(t, rec, extra, |r: R| r).await
    }

    /// [`App::insert_resource`] for a request that answers another shape of
    /// the new resource: `answer` makes it (and it is what is remembered).
    pub async fn insert_resource_as<R: Resource, A: Serialize>(
        &self,
        t: Tenant,
        rec: Record,
        mut extra: Vec<Op>,
        answer: impl FnOnce(R) -> A,
    ) -> Result<A> {
        let answer = answer(decode::<R>(&rec)?);
        extra.insert(0, Op::Put { record: rec, expect: Expect::Absent });
        self.commit_answering(t, extra, || Some(&answer)).await?;
        Ok(answer)
    }

    /// Waits for the other writers of a record that hold its lock, then holds it.
    pub(super) async fn lock_record(
        &self,
        t: Tenant,
        kind: Kind,
        id: Uuid,
    ) -> KeyedGuard<(Tenant, Kind, Uuid)> {
        self.record_locks.lock((t, kind, id)).await
    }

    /// Reads a record, lets `change` rewrite it, and writes it back only if no one
    /// else wrote it in between (retrying otherwise), under the record's lock.
    pub async fn update_resource<R, F>(&self, t: Tenant, id: Uuid, mut change: F) -> Result<R>
    where
        R: Resource,
        F: FnMut(&mut Record) -> Result<()>,
    {
        let _queue = self.lock_record(t, R::KIND, id).await;
        for _ in 0..RETRIES {
            let mut rec = self.load(t, R::KIND, id).await?;
            let version = rec.version;
            change(&mut rec)?;
            rec.updated_at = now().max(rec.created_at);
            let answer = decode::<R>(&rec)?;
            match self
                .store
                .commit(t.0, vec![Op::Put { record: rec, expect: Expect::Version(version) }])
                .await
            {
                Ok(()) => return Ok(answer),
                Err(StoreError::Stale) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Stale.into())
    }

    /// Deletes a participant (user or agent) with everything that depends on it:
    /// the records in its scope (`owned`), and the sessions that name it — removed
    /// when it is their only participant of its kind, else edited to drop it.
    /// One atomic commit, under the participant's lock (so its updates finish
    /// first); retried if any of those records changed meanwhile.
    pub async fn delete_participant(&self, t: Tenant, kind: Kind, id: Uuid, owned: &[Kind]) -> Result<()> {
        let field = match kind {
            Kind::Agent => "agents",
            _ => "users",
        };
        let _queue = self.lock_record(t, kind, id).await;
        for _ in 0..RETRIES {
            let me = self.load(t, kind, id).await?;
            let mut ops = vec![Op::Delete { kind, id, version: Some(me.version) }];
            for k in owned {
                ops.push(Op::DeleteScope { kind: *k, scope: id });
            }
            ops.extend(self.block_delete_ops(t, id).await?);
            let mut gone = Vec::new();
            for sid in self.store.referencing(t.0, Kind::Session, id).await? {
                let Some(mut s) = self.store.get(t.0, Kind::Session, sid).await? else { continue };
                let list: Vec<Uuid> = s
                    .data
                    .get(field)
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default();
                let rest: Vec<Uuid> = list.iter().copied().filter(|x| *x != id).collect();
                if rest.is_empty() && list.contains(&id) {
                    ops.push(Op::Delete { kind: Kind::Session, id: sid, version: Some(s.version) });
                    ops.extend(
                        super::sessions::SESSION_SCOPED.map(|kind| Op::DeleteScope { kind, scope: sid }),
                    );
                    gone.push(sid);
                } else {
                    let version = s.version;
                    s.data[field] = encode(&rest)?;
                    s.refs.retain(|x| *x != id);
                    s.updated_at = now().max(s.created_at);
                    ops.push(Op::Put { record: s, expect: Expect::Version(version) });
                }
            }
            let committed = self.store.commit(t.0, ops).await;
            for sid in gone {
                self.history.forget(t, sid);
            }
            match committed {
                Ok(()) => return Ok(()),
                Err(StoreError::Stale) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Stale.into())
    }
}
