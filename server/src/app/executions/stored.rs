//! The stored shapes of executions and their transitions, and how they read
//! as contract types. The domain reads them; what runs executions writes
//! them (see [`super::Runner`]).
//!
//! An execution's record holds where it is (status, counters, the last
//! transition's type, pending sleeps); its progress is its transitions, each
//! keyed by the step and moment it records, so a run that starts again after
//! a stop replays them instead of running their steps again.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::types::{Execution, ExecutionStatus, Metadata, Transition, TransitionTarget, TransitionType};
use crate::store::Record;

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

/// The stored fields of an execution's record, transition or snapshot.
pub fn read<T: serde::de::DeserializeOwned>(rec: &Record) -> crate::app::Result<T> {
    T::deserialize(&rec.data).map_err(|e| {
        crate::app::Error::Internal(format!("stored {} {} is unreadable: {e}", rec.kind.name(), rec.id))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ExecutionData, TransitionData};
    use crate::app::stored::tests::keeps;

    /// What the first release with executions writes: it must read, and write back, the same.
    #[test]
    fn executions_and_transitions_keep_their_stored_form() {
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
    }
}
