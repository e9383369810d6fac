//! Memory blocks: labelled text an agent keeps in view, owned by an agent or
//! a user, and their edits.
//!
//! A block is a record of [`Kind::Block`] whose scope is its owner and whose
//! unique name is its label. Every change of its value (its creation too) is
//! a record of [`Kind::BlockEdit`] in the block's scope, committed with the
//! block: the value before and after, the version it made, and where it came
//! from ([`Provenance`]: a request, or the turn and tool call of a model).
//!
//! Writers of a block queue on its lock and commit expecting the version
//! they read, so no edit is ever lost: a person's update names the version
//! it read (a 409 when the block changed since), a model's edit is applied
//! to the block as it is (retried when another writer got in first). A new
//! block touches its owner's record, so that deleting the owner (which lists
//! the owner's blocks, and deletes them and their edits in one commit) is
//! retried rather than leave the new block's edit behind.
//!
//! Blocks are in the system message of the turns they belong to (see
//! [`super::turn::plan`]): an agent's in each of its turns, a user's in each
//! turn of a session the user is in. The model edits them with the built-in
//! memory tools ([`App::memory_tool`]).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::docs::owner_kind;
use super::records::{RETRIES, Resource, decode, decode_data, encode, merge_metadata};
use super::stored::StoredOwnerRole;
use super::{App, Error, Result, Tenant};
use crate::api::error::{Issue, LocPart};
use crate::api::types::{
    Block, BlockEdit, BlockEditOp, CreateBlockRequest, DocOwner, EditSource, EditStatus,
    MAX_BLOCKS_PER_OWNER, OwnerRole, PatchBlockRequest,
};
use crate::store::{Expect, Kind, ListQuery, Op, Record, StoreError, now};

/// A block's stored fields (besides id, owner id = scope, label = unique name, metadata).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlockData {
    pub role: StoredOwnerRole,
    pub label: String,
    pub value: String,
    #[serde(default)]
    pub description: String,
    pub limit: i64,
    #[serde(default)]
    pub read_only: bool,
}

impl Resource for Block {
    const KIND: Kind = Kind::Block;
    type Data = BlockData;
    fn from_parts(rec: &Record, d: BlockData) -> Self {
        Block {
            id: rec.id,
            owner: DocOwner { id: rec.scope, role: d.role.into() },
            label: d.label,
            value: d.value,
            description: d.description,
            limit: d.limit,
            read_only: d.read_only,
            metadata: rec.metadata.clone().map(crate::api::types::Metadata),
            version: rec.version as i64,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

/// An edit's stored fields (besides id, block id = scope, created_at).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EditData {
    pub op: StoredEditOp,
    pub before: String,
    pub after: String,
    pub version: i64,
    pub source: Provenance,
    #[serde(default)]
    pub reverted_by: Option<Uuid>,
    #[serde(default)]
    pub status: StoredEditStatus,
}

/// Whether an edit is in its block, as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredEditStatus {
    #[default]
    Applied,
    Proposed,
    Rejected,
}

impl From<StoredEditStatus> for EditStatus {
    fn from(s: StoredEditStatus) -> Self {
        match s {
            StoredEditStatus::Applied => EditStatus::Applied,
            StoredEditStatus::Proposed => EditStatus::Proposed,
            StoredEditStatus::Rejected => EditStatus::Rejected,
        }
    }
}

/// What made an edit, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredEditOp {
    Create,
    Update,
    Insert,
    Replace,
    Rethink,
    Revert,
    Import,
}

impl From<StoredEditOp> for BlockEditOp {
    fn from(op: StoredEditOp) -> Self {
        match op {
            StoredEditOp::Create => BlockEditOp::Create,
            StoredEditOp::Update => BlockEditOp::Update,
            StoredEditOp::Insert => BlockEditOp::Insert,
            StoredEditOp::Replace => BlockEditOp::Replace,
            StoredEditOp::Rethink => BlockEditOp::Rethink,
            StoredEditOp::Revert => BlockEditOp::Revert,
            StoredEditOp::Import => BlockEditOp::Import,
        }
    }
}

/// Where a change of a block came from, as stored (the contract's
/// [`EditSource`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_job_id: Option<Uuid>,
}

impl Provenance {
    /// A change made by the request with this id.
    pub fn request(request_id: String) -> Self {
        Provenance { request_id: Some(request_id), ..Provenance::default() }
    }
}

impl From<Provenance> for EditSource {
    fn from(p: Provenance) -> Self {
        EditSource {
            agent_id: p.agent_id,
            session_id: p.session_id,
            message_id: p.message_id,
            tool_call_id: p.tool_call_id,
            request_id: p.request_id,
            execution_id: p.execution_id,
            learning_job_id: p.learning_job_id,
        }
    }
}

impl Resource for BlockEdit {
    const KIND: Kind = Kind::BlockEdit;
    type Data = EditData;
    fn from_parts(rec: &Record, d: EditData) -> Self {
        BlockEdit {
            id: rec.id,
            block_id: rec.scope,
            op: d.op.into(),
            before: d.before,
            after: d.after,
            version: d.version,
            source: d.source.into(),
            reverted_by: d.reverted_by,
            status: d.status.into(),
            created_at: rec.created_at,
        }
    }
}

fn chars(s: &str) -> i64 {
    s.chars().count() as i64
}

/// A 422 naming `field` of the body.
fn body_issue(field: &str, kind: &str, msg: String) -> Error {
    Error::Validation(vec![Issue {
        loc: vec![LocPart::Key("body".into()), LocPart::Key(field.into())],
        msg,
        kind: kind.into(),
    }])
}

/// The record of an edit of `block` (`version`: the block's version it
/// made, or, proposed, the one it was proposed on).
pub(crate) fn edit_record(
    block: Uuid,
    op: StoredEditOp,
    before: String,
    after: String,
    version: u64,
    source: Provenance,
    status: StoredEditStatus,
) -> Result<Record> {
    let data = EditData { op, before, after, version: version as i64, source, reverted_by: None, status };
    Ok(Record::fresh(Kind::BlockEdit, block, encode(&data)?))
}

/// The version a put expecting `expect` gives the record.
fn next_version(expect: Expect) -> u64 {
    match expect {
        Expect::Version(v) => v + 1,
        _ => 0,
    }
}

impl App {
    /// Adds a block to `owner`, its creation recorded as its first edit
    /// (`op`: `create`, or `import` for an Agent File's).
    pub async fn block_create(
        &self,
        t: Tenant,
        owner: DocOwner,
        req: CreateBlockRequest,
        source: Provenance,
    ) -> Result<Block> {
        self.block_create_as(t, owner, req, StoredEditOp::Create, source).await
    }

    pub(crate) async fn block_create_as(
        &self,
        t: Tenant,
        owner: DocOwner,
        req: CreateBlockRequest,
        op: StoredEditOp,
        source: Provenance,
    ) -> Result<Block> {
        self.load(t, owner_kind(owner.role), owner.id).await?;
        let held = self
            .store
            .list(t.0, Kind::Block, owner.id, &ListQuery::oldest_first(0, MAX_BLOCKS_PER_OWNER))
            .await?;
        if held.len() >= MAX_BLOCKS_PER_OWNER {
            return Err(Error::Conflict(format!(
                "{} {} has {MAX_BLOCKS_PER_OWNER} memory blocks, the most one may have: delete one first",
                owner_kind(owner.role).name(),
                owner.id
            )));
        }
        let data = BlockData {
            role: owner.role.into(),
            label: req.label.clone(),
            value: req.value,
            description: req.description,
            limit: req.limit,
            read_only: req.read_only,
        };
        let mut rec = Record::fresh(Kind::Block, owner.id, encode(&data)?);
        rec.unique = Some(req.label);
        rec.metadata = req.metadata.map(crate::api::types::Metadata::into_inner);
        let edit = edit_record(rec.id, op, String::new(), data.value, 0, source, StoredEditStatus::Applied)?;
        let answer = decode::<Block>(&rec)?;
        let ops = vec![
            Op::Put { record: rec, expect: Expect::Absent },
            Op::Put { record: edit, expect: Expect::Absent },
            // Bumps the owner's version: a delete of the owner that listed its
            // blocks before this commit is retried, and deletes this block's edit too.
            Op::Touch { kind: owner_kind(owner.role), id: owner.id },
        ];
        self.commit_answering(t, ops, || Some(&answer)).await?;
        Ok(answer)
    }

    /// `owner`'s blocks, by label.
    pub async fn block_list(&self, t: Tenant, owner: DocOwner) -> Result<Vec<Block>> {
        self.load(t, owner_kind(owner.role), owner.id).await?;
        self.blocks_of(t, owner.id).await
    }

    /// The blocks in the scope of `owner` (an agent's or a user's id), by label.
    pub async fn blocks_of(&self, t: Tenant, owner: Uuid) -> Result<Vec<Block>> {
        let recs = self
            .store
            .list(t.0, Kind::Block, owner, &ListQuery::oldest_first(0, MAX_BLOCKS_PER_OWNER))
            .await?;
        let mut blocks = recs.iter().map(decode::<Block>).collect::<Result<Vec<_>>>()?;
        blocks.sort_by(|a, b| a.label.cmp(&b.label));
        Ok(blocks)
    }

    async fn block_record(&self, t: Tenant, owner: DocOwner, id: Uuid) -> Result<Record> {
        let rec = self.load(t, Kind::Block, id).await?;
        let role = decode_data::<Block>(&rec)?.role;
        if rec.scope != owner.id || OwnerRole::from(role) != owner.role {
            return Err(Error::not_found(Kind::Block, id));
        }
        Ok(rec)
    }

    pub async fn block_get(&self, t: Tenant, owner: DocOwner, id: Uuid) -> Result<Block> {
        decode(&self.block_record(t, owner, id).await?)
    }

    /// Changes the fields sent, if the block is still at `req.version`.
    pub async fn block_patch(
        &self,
        t: Tenant,
        owner: DocOwner,
        id: Uuid,
        req: PatchBlockRequest,
        source: Provenance,
    ) -> Result<Block> {
        let _queue = self.lock_record(t, Kind::Block, id).await;
        let mut rec = self.block_record(t, owner, id).await?;
        if rec.version as i64 != req.version {
            return Err(Error::Conflict(format!(
                "memory block {id} is at version {}, not {}: read it again and apply the change to what it is now",
                rec.version, req.version
            )));
        }
        let mut data = decode_data::<Block>(&rec)?;
        let before = data.value.clone();
        if let Some(label) = req.label {
            rec.unique = Some(label.clone());
            data.label = label;
        }
        if let Some(value) = req.value {
            data.value = value;
        }
        if let Some(description) = req.description {
            data.description = description;
        }
        if let Some(limit) = req.limit {
            data.limit = limit;
        }
        if let Some(read_only) = req.read_only {
            data.read_only = read_only;
        }
        if chars(&data.value) > data.limit {
            let (field, msg) = match req.limit {
                Some(_) => (
                    "limit",
                    format!(
                        "the block's value has {} characters, over a limit of {}",
                        chars(&data.value),
                        data.limit
                    ),
                ),
                None => (
                    "value",
                    format!(
                        "the value has {} characters, over the block's limit of {}",
                        chars(&data.value),
                        data.limit
                    ),
                ),
            };
            return Err(body_issue(field, "value_error", msg));
        }
        rec.metadata = merge_metadata(rec.metadata.take(), req.metadata)?;
        let expect = Expect::Version(rec.version);
        let mut ops = Vec::new();
        if data.value != before {
            let edit = edit_record(
                id,
                StoredEditOp::Update,
                before,
                data.value.clone(),
                next_version(expect),
                source,
                StoredEditStatus::Applied,
            )?;
            ops.push(Op::Put { record: edit, expect: Expect::Absent });
        }
        rec.data = encode(&data)?;
        rec.updated_at = now().max(rec.created_at);
        let mut answer = decode::<Block>(&rec)?;
        answer.version = next_version(expect) as i64;
        ops.insert(0, Op::Put { record: rec, expect });
        match self.store.commit(t.0, ops).await {
            Ok(()) => Ok(answer),
            Err(StoreError::Stale) => Err(Error::Conflict(format!(
                "memory block {id} changed meanwhile: read it again and apply the change to what it is now"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a block with its edits.
    pub async fn block_delete(&self, t: Tenant, owner: DocOwner, id: Uuid) -> Result<()> {
        let _queue = self.lock_record(t, Kind::Block, id).await;
        let rec = self.block_record(t, owner, id).await?;
        let ops = vec![
            Op::Delete { kind: Kind::Block, id, version: Some(rec.version) },
            Op::DeleteScope { kind: Kind::BlockEdit, scope: id },
        ];
        match self.store.commit(t.0, ops).await {
            Ok(()) => Ok(()),
            Err(StoreError::Stale) => Err(Error::Conflict(format!(
                "memory block {id} changed while it was being deleted: send the request again"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// A block's edits, newest first.
    pub async fn block_edits(
        &self,
        t: Tenant,
        owner: DocOwner,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<BlockEdit>> {
        self.block_record(t, owner, id).await?;
        let mut q = ListQuery::oldest_first(0, limit.clamp(1, 1000) as usize);
        q.direction = crate::store::Direction::Desc;
        let recs = self.store.list(t.0, Kind::BlockEdit, id, &q).await?;
        recs.iter().map(decode).collect()
    }

    /// Puts a block's value back to what it was before `edit`, as a new
    /// edit: only when `edit` is the block's latest change of value, and was
    /// not reverted already.
    pub async fn block_revert(
        &self,
        t: Tenant,
        owner: DocOwner,
        id: Uuid,
        edit: Uuid,
        source: Provenance,
    ) -> Result<Block> {
        let _queue = self.lock_record(t, Kind::Block, id).await;
        for _ in 0..RETRIES {
            let mut rec = self.block_record(t, owner, id).await?;
            let mut edit_rec = self.load_in(t, Kind::BlockEdit, id, edit).await?;
            let mut reverted = decode_data::<BlockEdit>(&edit_rec)?;
            if let Some(by) = reverted.reverted_by {
                return Err(Error::Conflict(format!("edit {edit} was reverted already (by edit {by})")));
            }
            if reverted.status != StoredEditStatus::Applied {
                return Err(Error::Conflict(format!(
                    "edit {edit} is a proposal that was not applied: there is nothing to revert"
                )));
            }
            let mut data = decode_data::<Block>(&rec)?;
            if data.value != reverted.after {
                return Err(Error::Conflict(format!(
                    "memory block {id} changed after edit {edit}: revert the later edits first"
                )));
            }
            if chars(&reverted.before) > data.limit {
                return Err(Error::Conflict(format!(
                    "the value before edit {edit} has {} characters, over the block's limit of {}: raise the limit first",
                    chars(&reverted.before),
                    data.limit
                )));
            }
            let expect = Expect::Version(rec.version);
            let new = edit_record(
                id,
                StoredEditOp::Revert,
                data.value.clone(),
                reverted.before.clone(),
                next_version(expect),
                source.clone(),
                StoredEditStatus::Applied,
            )?;
            reverted.reverted_by = Some(new.id);
            let edit_version = edit_rec.version;
            edit_rec.data = encode(&reverted)?;
            data.value = reverted.before;
            rec.data = encode(&data)?;
            rec.updated_at = now().max(rec.created_at);
            let mut answer = decode::<Block>(&rec)?;
            answer.version = next_version(expect) as i64;
            let ops = vec![
                Op::Put { record: rec, expect },
                Op::Put { record: new, expect: Expect::Absent },
                Op::Put { record: edit_rec, expect: Expect::Version(edit_version) },
            ];
            match self.store.commit(t.0, ops).await {
                Ok(()) => return Ok(answer),
                Err(StoreError::Stale) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Stale.into())
    }

    /// Approves (into the block) or rejects a proposed edit (learning's, in
    /// `approve` mode). An approval needs the block as it was when the edit
    /// was proposed (a 409 otherwise).
    pub async fn block_decide(
        &self,
        t: Tenant,
        owner: DocOwner,
        id: Uuid,
        edit: Uuid,
        approve: bool,
        source: Provenance,
    ) -> Result<(Block, BlockEdit)> {
        let _queue = self.lock_record(t, Kind::Block, id).await;
        let mut rec = self.block_record(t, owner, id).await?;
        let mut edit_rec = self.load_in(t, Kind::BlockEdit, id, edit).await?;
        let mut proposed = decode_data::<BlockEdit>(&edit_rec)?;
        if proposed.status != StoredEditStatus::Proposed {
            return Err(Error::Conflict(format!("edit {edit} is no proposal waiting for a decision")));
        }
        let mut data = decode_data::<Block>(&rec)?;
        let edit_version = edit_rec.version;
        let mut ops = Vec::new();
        if approve {
            if data.value != proposed.before {
                return Err(Error::Conflict(format!(
                    "memory block {id} changed since edit {edit} was proposed: it no longer fits; reject it"
                )));
            }
            if chars(&proposed.after) > data.limit {
                return Err(Error::Conflict(format!(
                    "edit {edit} would make the block {} characters long, over its limit of {}: raise the limit first",
                    chars(&proposed.after),
                    data.limit
                )));
            }
            let expect = Expect::Version(rec.version);
            data.value = proposed.after.clone();
            rec.data = encode(&data)?;
            rec.updated_at = now().max(rec.created_at);
            proposed.status = StoredEditStatus::Applied;
            proposed.version = next_version(expect) as i64;
            if proposed.source.request_id.is_none() {
                proposed.source.request_id = source.request_id;
            }
            ops.push(Op::Put { record: rec.clone(), expect });
        } else {
            proposed.status = StoredEditStatus::Rejected;
        }
        edit_rec.data = encode(&proposed)?;
        ops.push(Op::Put { record: edit_rec.clone(), expect: Expect::Version(edit_version) });
        match self.store.commit(t.0, ops).await {
            Ok(()) => {}
            Err(StoreError::Stale) => {
                return Err(Error::Conflict(format!(
                    "memory block {id} changed meanwhile: send the request again"
                )));
            }
            Err(e) => return Err(e.into()),
        }
        let mut block = decode::<Block>(&rec)?;
        if approve {
            block.version = proposed.version;
        }
        Ok((block, decode::<BlockEdit>(&edit_rec)?))
    }

    /// The ops that delete every block of `owner` and their edits (for the
    /// owner's delete, which commits them with its own).
    pub(crate) async fn block_delete_ops(&self, t: Tenant, owner: Uuid) -> Result<Vec<Op>> {
        let all = ListQuery::oldest_first(0, 10 * MAX_BLOCKS_PER_OWNER);
        let recs = self.store.list(t.0, Kind::Block, owner, &all).await?;
        let mut ops: Vec<Op> =
            recs.iter().map(|r| Op::DeleteScope { kind: Kind::BlockEdit, scope: r.id }).collect();
        ops.push(Op::DeleteScope { kind: Kind::Block, scope: owner });
        Ok(ops)
    }
}
