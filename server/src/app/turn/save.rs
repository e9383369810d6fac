//! Saving a turn: one commit of its messages and what goes with them.

use serde::Serialize;
use uuid::Uuid;

use super::super::chat_lock::SessionLease;
use super::super::locks::KeyedGuard;
use super::super::messages::message_records;
use super::super::{App, Result, Tenant};
use super::convert::history_item;
use crate::api::types::{CreateMessageRequest, Message};
use crate::store::{Expect, Kind, Op, Record, StoreError};

/// Where a turn saves, and what besides its reply: the session (held while
/// the turn runs), a new session to create with it, the request's new
/// messages, and the ids chosen in advance for them and the reply.
pub struct Saving {
    pub tenant: Tenant,
    pub session: Uuid,
    /// Whether the turn is saved at all (`save`, `store`).
    pub save: bool,
    /// A new session's record and ops, committed first, with the turn.
    pub new_session: Option<(Record, Vec<Op>)>,
    /// The request's new messages (the reply goes after them).
    pub new_messages: Vec<CreateMessageRequest>,
    /// Ids of the new messages, then of the reply, when the answer names them
    /// before they are saved (a streamed response's items); else fresh ones.
    pub ids: Option<Vec<Uuid>>,
    pub lease: Option<SessionLease>,
    pub lock: Option<KeyedGuard<(Tenant, Uuid)>>,
}

impl Saving {
    /// Completes [`Saving::ids`] (when chosen in advance) with the ids of the
    /// rounds' messages and the answer's, for the turn ending as `ending`.
    pub fn with_round_ids(&mut self, rounds: &super::rounds::Rounds, ending: &super::rounds::Ending) {
        if let Some(ids) = &mut self.ids {
            ids.truncate(self.new_messages.len());
            ids.extend(rounds.ids_to_save(ending));
        }
    }
}

impl App {
    /// Saves a turn: the new messages and `replies` (the agent loop's
    /// messages and the answer: see [`super::rounds`]) as
    /// records, in one commit with the session's change (or its creation), the
    /// release of its lease, `then(made)`'s ops after the messages' and
    /// `then`'s answer, remembered for the request's `Idempotency-Key` (see
    /// [`App::commit_answering`]). Then the cached history has the messages
    /// (or is forgotten when the commit's outcome is unknown). Not saved
    /// (`save` false): only the lease is released. Gives `then`'s answer.
    pub(in crate::app) async fn save_turn<A: Serialize>(
        &self,
        s: &Saving,
        replies: Vec<CreateMessageRequest>,
        then: impl FnOnce(&[Message]) -> Result<(Vec<Op>, Option<A>)>,
    ) -> Result<Option<A>> {
        let mut messages = s.new_messages.clone();
        messages.extend(replies);
        let (mut made, puts) = message_records(s.session, messages).await?;
        let puts = match &s.ids {
            Some(ids) => with_ids(puts, &mut made, ids),
            None => puts,
        };
        let (tail, answer) = then(&made)?;
        if !s.save {
            if let Some(lease) = &s.lease {
                lease.release().await;
            }
            return Ok(answer);
        }
        let mut ops = match &s.new_session {
            Some((record, ops)) => {
                let mut all = vec![Op::Put { record: record.clone(), expect: Expect::Absent }];
                all.extend(ops.iter().cloned());
                all
            }
            None => vec![self.session_changes(s.session)],
        };
        if let Some(lease) = &s.lease {
            ops.push(lease.release_op().await?);
        }
        ops.extend(puts);
        ops.extend(tail);
        let cached = s.new_session.is_none();
        self.commit_messages(s.tenant, s.session, ops, &made, cached, || answer.as_ref()).await?;
        if let Some(lease) = &s.lease {
            lease.released().await;
        }
        Ok(answer)
    }

    /// Commits `ops` that append `made` to a session, with `answer` for the
    /// request's `Idempotency-Key`; then the session's cached history has them
    /// (`cached`: a new session has none), or is forgotten when whether they
    /// landed is unknown.
    pub(in crate::app) async fn commit_messages<A: Serialize>(
        &self,
        t: Tenant,
        session: Uuid,
        ops: Vec<Op>,
        made: &[Message],
        cached: bool,
        answer: impl FnOnce() -> Option<A>,
    ) -> Result<()> {
        let committed = self.commit_answering(t, ops, answer).await;
        match &committed {
            Ok(()) if cached => {
                let items: Vec<_> = made.iter().map(history_item).collect();
                self.history.appended(t, session, &items);
            }
            Ok(()) => {}
            Err(_) => self.history.forget(t, session),
        }
        committed.map_err(|e| match e {
            // Only a turn's session lock is deleted with a version: it was taken over.
            StoreError::Stale | StoreError::NotFound { kind: Kind::SessionLock, .. } => {
                super::super::chat_lock::lost(session)
            }
            e => e.into(),
        })
    }
}

/// Puts the ids chosen in advance on the new messages' records.
fn with_ids(puts: Vec<Op>, made: &mut [Message], ids: &[Uuid]) -> Vec<Op> {
    for (m, id) in made.iter_mut().zip(ids) {
        m.id = *id;
    }
    puts.into_iter()
        .zip(ids)
        .map(|(op, id)| match op {
            Op::Put { mut record, expect } => {
                record.id = *id;
                Op::Put { record, expect }
            }
            other => other,
        })
        .collect()
}
