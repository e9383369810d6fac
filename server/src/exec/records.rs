//! What the engine writes of executions beside their stored shapes (which the
//! domain owns, in [`crate::app::executions::stored`]): task snapshots, the
//! markers of executions under way, and the ops of every commit of an
//! execution.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::types::{Agent, Task, ToolDef, TransitionType};
pub use crate::app::executions::stored::{
    ExecutionData, Paused, StoredPlace, StoredStatus, StoredTransitionType, TransitionData, execution_of,
    read, transition_of,
};
use crate::app::records::{decode, encode};
use crate::app::stored::StoredToolDef;
use crate::store::{Expect, Kind, Op, Record, Store, now};

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
    /// A new execution's, with its input: queued, nothing run yet.
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::StoredSnapshot;
    use crate::app::stored::tests::keeps;

    /// What the first release with executions writes: it must read, and write back, the same.
    #[test]
    fn snapshots_keep_their_stored_form() {
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
