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
use crate::store::Record;

/// An execution's stored fields (besides id, task, timestamps and metadata).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExecutionData {
    pub status: ExecutionStatus,
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
    pub last: Option<TransitionType>,
    /// The values of `set` steps so far.
    #[serde(default)]
    pub state: Map<String, Value>,
    /// Sleeps under way: the key of the sleeping step → when it ends.
    #[serde(default)]
    pub timers: BTreeMap<String, DateTime<Utc>>,
}

impl ExecutionData {
    pub fn new(input: Map<String, Value>) -> Self {
        ExecutionData {
            status: ExecutionStatus::Queued,
            input,
            output: None,
            error: None,
            transitions: 0,
            last: None,
            state: Map::new(),
            timers: BTreeMap::new(),
        }
    }
}

/// An execution as the contract shows it.
pub fn execution_of(rec: &Record, d: &ExecutionData) -> Execution {
    Execution {
        id: rec.id,
        task_id: rec.scope,
        status: d.status,
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
    pub kind: TransitionType,
    pub output: Value,
    pub current: TransitionTarget,
    pub next: Option<TransitionTarget>,
    /// Which step of which run this records: unique within the execution.
    pub key: String,
    /// What a paused step needs to go on (a prompt's conversation), when it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_state: Option<Value>,
}

pub fn transition_of(rec: &Record, d: &TransitionData) -> Transition {
    Transition {
        id: rec.id,
        execution_id: rec.scope,
        kind: d.kind,
        output: d.output.clone(),
        current: d.current.clone(),
        next: d.next.clone(),
        metadata: rec.metadata.clone().map(Metadata),
        created_at: rec.created_at,
    }
}

/// What an execution runs with, as read when it started: later edits of the
/// task, its agent or their tools do not change it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub task: Task,
    pub agent: Agent,
    pub tools: Vec<ToolDef>,
}

/// The execution id of a record's scope, for transitions and snapshots.
pub fn owner(rec: &Record) -> Uuid {
    rec.scope
}

/// The stored fields of an execution's record, transition or snapshot.
pub fn read<T: serde::de::DeserializeOwned>(rec: &Record) -> crate::app::Result<T> {
    T::deserialize(&rec.data).map_err(|e| {
        crate::app::Error::Internal(format!("stored {} {} is unreadable: {e}", rec.kind.name(), rec.id))
    })
}
