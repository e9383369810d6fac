//! Messages: appended to a session, listed oldest first.
//!
//! Messages are records scoped by their session. Each gets its id and its
//! `created_at` from one [`crate::store::stamp`], and lists are ordered by
//! (`created_at`, id): the order they were appended in, even within one
//! microsecond, and the same on every read.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::{Resource, decode, encode};
use super::stored::{StoredPart, StoredRole, StoredToolCall};
use super::{App, Error, Result, Tenant};
use crate::api::types::Metadata;
use crate::api::types::{CreateMessageRequest, Message, MessagePart, ToolCall};
use crate::models::tokens;
use crate::store::{Expect, Kind, ListQuery, Op, Record};

/// A message's stored fields (besides id, session, timestamps and metadata).
#[derive(Serialize, Deserialize)]
pub struct MessageData {
    pub role: StoredRole,
    pub content: String,
    pub name: Option<String>,
    pub tool_calls: Option<Vec<StoredToolCall>>,
    pub tool_call_id: Option<String>,
    pub token_count: i64,
    /// The content's parts, when it has images or files (absent in records of 0.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<StoredPart>>,
}

impl Resource for Message {
    const KIND: Kind = Kind::Message;
    type Data = MessageData;
    fn from_parts(rec: &Record, d: MessageData) -> Self {
        Message {
            id: rec.id,
            session_id: rec.scope,
            role: d.role.into(),
            content: d.content,
            name: d.name,
            tool_calls: d.tool_calls.map(|calls| calls.into_iter().map(ToolCall::from).collect()),
            tool_call_id: d.tool_call_id,
            parts: d.parts.map(|parts| parts.into_iter().map(MessagePart::from).collect()),
            token_count: d.token_count,
            metadata: rec.metadata.clone().map(Metadata),
            created_at: rec.created_at,
        }
    }
}

/// The tokens of a message's content (its parts too) and of the calls it makes.
fn token_count(m: &CreateMessageRequest) -> i64 {
    let calls = m.tool_calls.iter().flatten();
    let n = tokens::count_tokens(&m.content)
        + m.parts.as_deref().map_or(0, super::parts::media_tokens)
        + calls
            .map(|c| tokens::count_tokens(&c.function.name) + tokens::count_tokens(&c.function.arguments))
            .sum::<usize>();
    n as i64
}

/// Messages whose text passes this many bytes are counted on a blocking
/// thread: counting megabytes takes long enough to hold up the other requests
/// of an async worker.
const COUNT_INLINE_BYTES: usize = 64 << 10;

/// The token counts of `messages` (given back with them).
async fn count_tokens_of(
    messages: Vec<CreateMessageRequest>,
) -> Result<(Vec<CreateMessageRequest>, Vec<i64>)> {
    let bytes: usize = messages.iter().map(|m| m.content.len()).sum();
    if bytes <= COUNT_INLINE_BYTES {
        let counts = messages.iter().map(token_count).collect();
        return Ok((messages, counts));
    }
    tokio::task::spawn_blocking(move || {
        let counts = messages.iter().map(token_count).collect();
        (messages, counts)
    })
    .await
    .map_err(|e| Error::Internal(format!("counting tokens failed: {e}")))
}

/// The records of new messages of `session` (token counts included), and their puts.
pub(super) async fn message_records(
    session: Uuid,
    messages: Vec<CreateMessageRequest>,
) -> Result<(Vec<Message>, Vec<Op>)> {
    let (messages, counts) = count_tokens_of(messages).await?;
    let mut created = Vec::with_capacity(messages.len());
    let mut ops = Vec::with_capacity(messages.len());
    for (m, token_count) in messages.into_iter().zip(counts) {
        let data = MessageData {
            token_count,
            role: m.role.into(),
            content: m.content,
            name: m.name,
            tool_calls: m.tool_calls.map(|calls| calls.into_iter().map(StoredToolCall::from).collect()),
            tool_call_id: m.tool_call_id,
            parts: m.parts.map(|parts| parts.into_iter().map(StoredPart::from).collect()),
        };
        let mut rec = Record::fresh(Kind::Message, session, encode(&data)?);
        rec.metadata = m.metadata.map(Metadata::into_inner);
        created.push(decode::<Message>(&rec)?);
        ops.push(Op::Put { record: rec, expect: Expect::Absent });
    }
    Ok((created, ops))
}

impl App {
    /// The op that a change of a session's messages commits with: where other
    /// servers write too, it bumps the session's version, which their cached
    /// histories are checked against (see `history`); else it requires the session.
    pub(super) fn session_changes(&self, session: Uuid) -> Op {
        if self.store.shared() {
            Op::Touch { kind: Kind::Session, id: session }
        } else {
            Op::Require { kind: Kind::Session, id: session }
        }
    }

    /// Deletes a message of a session.
    pub async fn message_delete(&self, t: Tenant, session: Uuid, id: Uuid) -> Result<()> {
        let ops = vec![self.session_changes(session), Op::Delete { kind: Kind::Message, id, version: None }];
        let committed = self.commit_answering(t, ops, || None::<()>).await;
        self.history.forget(t, session);
        committed.map_err(Into::into)
    }

    /// Appends messages to a session, in the order given, in one atomic commit.
    /// `answer`, given the messages made, says what the request answers,
    /// remembered with its idempotency key in that commit (see
    /// [`App::commit_answering`]).
    pub async fn append_messages<A: Serialize>(
        &self,
        t: Tenant,
        session: Uuid,
        messages: Vec<CreateMessageRequest>,
        answer: impl FnOnce(&[Message]) -> Option<A>,
    ) -> Result<Vec<Message>> {
        let (created, puts) = message_records(session, messages).await?;
        let mut ops = vec![self.session_changes(session)];
        ops.extend(puts);
        self.commit_messages(t, session, ops, &created, true, || answer(&created)).await?;
        Ok(created)
    }

    pub async fn message_create(
        &self,
        t: Tenant,
        session: Uuid,
        req: CreateMessageRequest,
    ) -> Result<Message> {
        let mut created = self.append_messages(t, session, vec![req], |made| made.first().cloned()).await?;
        Ok(created.pop().expect("one message appended"))
    }

    /// A page of a session's messages (404 if the session does not exist).
    pub async fn message_list(&self, t: Tenant, session: Uuid, q: &ListQuery) -> Result<Vec<Message>> {
        self.load(t, Kind::Session, session).await?;
        self.list_resources(t, session, q).await
    }
}
