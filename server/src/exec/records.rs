//! The stored shapes of executions, their transitions and their task
//! snapshots, and how they read as contract types.
//!
//! An execution's record holds where it is (status, counters, the last
//! transition's type, pending sleeps); its progress is its transitions, each
//! keyed by the place it records (see [`super::run`]), so a run that starts
//! again after a stop replays them instead of running their steps again.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::types::{
    Agent, Execution, ExecutionStatus, Metadata, Task, ToolDef, Transition, TransitionTarget, TransitionType,
};
use crate::app::records::{decode, encode};
use crate::app::stored::StoredToolDef;
use crate::store::{Expect, Kind, Op, Record, Store, now};

/// An execution's status, as stored (see [`ExecutionStatus`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredStatus {
    Queued,
    Starting,
    Running,
    AwaitingInput,
    Succeeded,
    Failed,
    Cancelled,
}

impl From<ExecutionStatus> for StoredStatus {
    fn from(s: ExecutionStatus) -> Self {
        match s {
            ExecutionStatus::Queued => StoredStatus::Queued,
            ExecutionStatus::Starting => StoredStatus::Starting,
            ExecutionStatus::Running => StoredStatus::Running,
            ExecutionStatus::AwaitingInput => StoredStatus::AwaitingInput,
            ExecutionStatus::Succeeded => StoredStatus::Succeeded,
            ExecutionStatus::Failed => StoredStatus::Failed,
            ExecutionStatus::Cancelled => StoredStatus::Cancelled,
        }
    }
}

impl From<StoredStatus> for ExecutionStatus {
    fn from(s: StoredStatus) -> Self {
        match s {
            StoredStatus::Queued => ExecutionStatus::Queued,
            StoredStatus::Starting => ExecutionStatus::Starting,
            StoredStatus::Running => ExecutionStatus::Running,
            StoredStatus::AwaitingInput => ExecutionStatus::AwaitingInput,
            StoredStatus::Succeeded => ExecutionStatus::Succeeded,
            StoredStatus::Failed => ExecutionStatus::Failed,
            StoredStatus::Cancelled => ExecutionStatus::Cancelled,
        }
    }
}

/// A transition's type, as stored (see [`TransitionType`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredTransitionType {
    Init,
    InitBranch,
    Step,
    Resume,
    FinishBranch,
    Wait,
    Finish,
    Error,
    Cancelled,
}

impl From<TransitionType> for StoredTransitionType {
    fn from(t: TransitionType) -> Self {
        match t {
            TransitionType::Init => StoredTransitionType::Init,
            TransitionType::InitBranch => StoredTransitionType::InitBranch,
            TransitionType::Step => StoredTransitionType::Step,
            TransitionType::Resume => StoredTransitionType::Resume,
            TransitionType::FinishBranch => StoredTransitionType::FinishBranch,
            TransitionType::Wait => StoredTransitionType::Wait,
            TransitionType::Finish => StoredTransitionType::Finish,
            TransitionType::Error => StoredTransitionType::Error,
            TransitionType::Cancelled => StoredTransitionType::Cancelled,
        }
    }
}

impl From<StoredTransitionType> for TransitionType {
    fn from(t: StoredTransitionType) -> Self {
        match t {
            StoredTransitionType::Init => TransitionType::Init,
            StoredTransitionType::InitBranch => TransitionType::InitBranch,
            StoredTransitionType::Step => TransitionType::Step,
            StoredTransitionType::Resume => TransitionType::Resume,
            StoredTransitionType::FinishBranch => TransitionType::FinishBranch,
            StoredTransitionType::Wait => TransitionType::Wait,
            StoredTransitionType::Finish => TransitionType::Finish,
            StoredTransitionType::Error => TransitionType::Error,
            StoredTransitionType::Cancelled => TransitionType::Cancelled,
        }
    }
}

/// A place in a task, as stored (see [`TransitionTarget`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPlace {
    pub workflow: String,
    pub step: i64,
}

impl From<TransitionTarget> for StoredPlace {
    fn from(t: TransitionTarget) -> Self {
        StoredPlace { workflow: t.workflow, step: t.step }
    }
}

impl From<StoredPlace> for TransitionTarget {
    fn from(p: StoredPlace) -> Self {
        TransitionTarget { workflow: p.workflow, step: p.step }
    }
}

/// An execution's stored fields (besides id, task, timestamps and metadata).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExecutionData {
    pub status: StoredStatus,
    pub input: Map<String, Value>,
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    pub error: Option<String>,
    /// Transitions committed so far.
    #[serde(default)]
    pub transitions: u64,
    /// The type of the last transition (what may follow it is fixed).
    #[serde(default)]
    pub last: Option<StoredTransitionType>,
    /// The values of `set` steps so far.
    #[serde(default)]
    pub state: Map<String, Value>,
    /// Sleeps under way: the key of the sleeping step → when it ends.
    #[serde(default)]
    pub timers: BTreeMap<String, DateTime<Utc>>,
    /// Until when the execution has nothing to run (a sleep outside concurrent
    /// branches): meanwhile no run of it is loaded, only this time is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asleep_until: Option<DateTime<Utc>>,
    /// The engine (one per server start) whose run was working on the
    /// execution as of this record: set by every commit of a run that goes on
    /// working, cleared when the run stops cleanly (the execution ends, waits
    /// for input or sleeps, or the server stops cleanly). A run that starts
    /// and finds another engine here knows that engine's server died, or lost
    /// the execution's lease, in the middle of a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<Uuid>,
    /// How many servers died (or lost the lease) mid-step since the last
    /// transition: past `executions.max_step_attempts`, the execution fails.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stopped_mid_step: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ExecutionData {
    pub fn status(&self) -> ExecutionStatus {
        self.status.into()
    }

    pub fn last(&self) -> Option<TransitionType> {
        self.last.map(Into::into)
    }

    pub fn new(input: Map<String, Value>) -> Self {
        ExecutionData {
            status: StoredStatus::Queued,
            input,
            output: None,
            error: None,
            transitions: 0,
            last: None,
            state: Map::new(),
            timers: BTreeMap::new(),
            asleep_until: None,
            in_flight: None,
            stopped_mid_step: 0,
        }
    }
}

/// An execution as the contract shows it.
pub fn execution_of(rec: &Record, d: &ExecutionData) -> Execution {
    Execution {
        id: rec.id,
        task_id: rec.scope,
        status: d.status(),
        input: d.input.clone(),
        output: d.output.clone(),
        error: d.error.clone(),
        sleeping_until: d.timers.values().min().copied(),
        metadata: rec.metadata.clone().map(Metadata),
        created_at: rec.created_at,
        updated_at: rec.updated_at,
    }
}

/// A transition's stored fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TransitionData {
    #[serde(rename = "type")]
    pub kind: StoredTransitionType,
    pub output: Value,
    pub current: StoredPlace,
    pub next: Option<StoredPlace>,
    /// Which step of which run this records: unique within the execution.
    pub key: String,
    /// Where a waiting step goes on, when it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_state: Option<Paused>,
}

/// What a `wait` keeps for its resume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Paused {
    /// Where the execution goes on (the `resume`'s `next`).
    pub next: Option<StoredPlace>,
    /// What the paused step needs (a prompt's conversation), if anything.
    pub state: Option<Value>,
}

pub fn transition_of(rec: &Record, d: &TransitionData) -> Transition {
    Transition {
        id: rec.id,
        execution_id: rec.scope,
        kind: d.kind.into(),
        output: d.output.clone(),
        current: d.current.clone().into(),
        next: d.next.clone().map(Into::into),
        metadata: rec.metadata.clone().map(Metadata),
        created_at: rec.created_at,
    }
}

/// What an execution runs with, as read when it started: later edits of the
/// task, its agent or their tools do not change it.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub task: Task,
    pub agent: Agent,
    pub tools: Vec<ToolDef>,
}

/// A [`Snapshot`] as stored: the task's and the agent's records as they were
/// (their stored shapes), and the tools in theirs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoredSnapshot {
    pub task: Record,
    pub agent: Record,
    pub tools: Vec<StoredToolDef>,
}

impl StoredSnapshot {
    pub fn snapshot(&self) -> crate::app::Result<Snapshot> {
        Ok(Snapshot {
            task: decode(&self.task)?,
            agent: decode(&self.agent)?,
            tools: self.tools.iter().cloned().map(Into::into).collect(),
        })
    }
}

/// The execution id of a record's scope, for transitions and snapshots.
pub fn owner(rec: &Record) -> Uuid {
    rec.scope
}

/// The scope of every [`active_marker`]: one list per tenant, so that the
/// executions a tenant has under way are counted by one read.
pub const ACTIVE_SCOPE: Uuid = Uuid::nil();

/// The record that marks an execution as not ended yet (see [`Kind::ActiveExecution`]).
pub fn active_marker(execution: Uuid) -> Record {
    Record::new(Kind::ActiveExecution, execution, ACTIVE_SCOPE, Value::Null)
}

/// Whether a marker says its execution waits for input (written on shared
/// stores only, whose servers look through the markers every few seconds:
/// those need not read a waiting execution each time).
pub fn marker_waits(marker: &Record) -> bool {
    marker.data.get("waiting").and_then(Value::as_bool) == Some(true)
}

/// Until when a marker says its execution sleeps with no run loaded (shared
/// stores only, like [`marker_waits`]).
pub fn marker_asleep_until(marker: &Record) -> Option<DateTime<Utc>> {
    marker.data.get("asleep_until").and_then(|v| DateTime::<Utc>::deserialize(v).ok())
}

/// What an execution's marker says on a shared store, from the execution's
/// stored fields as JSON: that it waits, or sleeps until when, or nothing.
fn marker_data(execution: &Value) -> Value {
    if execution.get("status").and_then(Value::as_str) == Some("awaiting_input") {
        return serde_json::json!({ "waiting": true });
    }
    match execution.get("asleep_until") {
        Some(until) if !until.is_null() => serde_json::json!({ "asleep_until": until }),
        _ => Value::Null,
    }
}

impl ExecutionData {
    /// What a transition of `kind` does to the execution's record.
    pub fn advance(&mut self, kind: TransitionType) {
        self.transitions += 1;
        self.last = Some(kind.into());
        self.status = kind.status().into();
    }
}

/// The ops of one commit of an execution: `transitions` inserted, and its
/// `record` (as read, at its version) replaced by one holding `data`; an
/// execution that ends also loses its [`active_marker`] (when it has one);
/// on a shared store, one that ends or waits for input also loses its lease
/// (see [`super::lease`]), and its marker says whether it waits.
/// Every writer of an execution (its run, a client's cancel or resume)
/// commits through these, so that none lands on a state it did not read.
/// `record` becomes what is written.
pub async fn commit_ops(
    store: &dyn Store,
    tenant: Uuid,
    record: &mut Record,
    data: &ExecutionData,
    transitions: &[TransitionData],
) -> crate::app::Result<Vec<Op>> {
    let mut ops = Vec::with_capacity(transitions.len() + 2);
    for t in transitions {
        let rec = Record::fresh(Kind::Transition, record.id, encode(t)?);
        ops.push(Op::Put { record: rec, expect: Expect::Absent });
    }
    // What the marker says as read (before `record.data` becomes the new one), without decoding the rest.
    let said = marker_data(&record.data);
    record.updated_at = now().max(record.created_at);
    record.data = encode(data)?;
    ops.push(Op::Put { record: record.clone(), expect: Expect::Version(record.version) });
    let ends = data.status().is_terminal();
    let waits = data.status() == crate::api::types::ExecutionStatus::AwaitingInput;
    let says = marker_data(&record.data);
    if ends && store.get(tenant, Kind::ActiveExecution, record.id).await?.is_some() {
        ops.push(Op::Delete { kind: Kind::ActiveExecution, id: record.id, version: None });
    }
    if store.shared() {
        if !ends
            && says != said
            && let Some(mut marker) = store.get(tenant, Kind::ActiveExecution, record.id).await?
        {
            let expect = Expect::Version(marker.version);
            marker.data = says;
            marker.updated_at = now().max(marker.created_at);
            ops.push(Op::Put { record: marker, expect });
        }
        // Whichever server holds the lease, nothing is left to run until a resume
        // (which claims it afresh): a holder elsewhere stops its run at once.
        if (ends || waits) && store.get(tenant, Kind::ExecutionLease, record.id).await?.is_some() {
            ops.push(Op::Delete { kind: Kind::ExecutionLease, id: record.id, version: None });
        }
    }
    Ok(ops)
}

/// The stored fields of an execution's record, transition or snapshot.
pub fn read<T: serde::de::DeserializeOwned>(rec: &Record) -> crate::app::Result<T> {
    T::deserialize(&rec.data).map_err(|e| {
        crate::app::Error::Internal(format!("stored {} {} is unreadable: {e}", rec.kind.name(), rec.id))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ExecutionData, StoredSnapshot, TransitionData};
    use crate::app::stored::tests::keeps;

    /// What the first release with executions writes: it must read, and write back, the same.
    #[test]
    fn executions_transitions_and_snapshots_keep_their_stored_form() {
        keeps::<ExecutionData>(json!({
            "status": "awaiting_input", "input": {"topics": ["a"]}, "output": null, "error": null,
            "transitions": 4, "last": "wait", "state": {"seen": 2},
            "timers": {"main[1]": "2026-11-23T20:00:00Z"}}));
        keeps::<ExecutionData>(json!({
            "status": "running", "input": {}, "output": null, "error": null,
            "transitions": 2, "last": "step", "state": {},
            "timers": {"main[1]": "2026-11-23T20:00:00Z"}, "asleep_until": "2026-11-23T20:00:00Z",
            "in_flight": "01a20a1e-613b-7774-b3d2-2547029b969b", "stopped_mid_step": 2}));
        keeps::<TransitionData>(json!({
            "type": "wait", "output": {"tool_call": {"id": "call_1", "name": "f", "arguments": {}}},
            "current": {"workflow": "main[2].then", "step": 0}, "next": null, "key": "main[2].then[0]#call1",
            "resume_state": {"next": {"workflow": "main[2].then", "step": 0}, "state": null}}));
        keeps::<TransitionData>(json!({
            "type": "finish_branch", "output": 7, "current": {"workflow": "sub", "step": 1},
            "next": {"workflow": "main", "step": 0}, "key": "main[0]#fin"}));
        let record = |kind: &str, data| {
            json!({"kind": kind, "id": "01a20a1e-613b-7774-b3d2-2547029b969b", "scope": "01a20a1e-60eb-75b7-b66f-22ef4d93db1c",
                   "created_at": "2026-11-23T20:00:00Z", "updated_at": "2026-11-23T20:00:00Z", "version": 3,
                   "metadata": null, "data": data})
        };
        keeps::<StoredSnapshot>(json!({
            "task": record("Task", json!({"name": "t", "description": "", "input_schema": null,
                                     "main": [{"evaluate": {"x": "1"}}], "tools": [], "inherit_tools": true})),
            "agent": record("Agent", json!({"name": "A", "about": "", "model": "", "instructions": [],
                                      "default_settings": null})),
            "tools": []}));
        let snapshot: StoredSnapshot = serde_json::from_value(json!({
            "task": record("Task", json!({"name": "t", "description": "", "input_schema": null,
                                     "main": [{"evaluate": {"x": "1"}}], "tools": [], "inherit_tools": true})),
            "agent": record("Agent", json!({"name": "A", "about": "", "model": "", "instructions": [],
                                      "default_settings": null})),
            "tools": []}))
        .unwrap();
        let read = snapshot.snapshot().unwrap();
        assert_eq!((read.task.name.as_str(), read.agent.name.as_str()), ("t", "A"));
    }
}
