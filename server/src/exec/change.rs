//! The writes of an execution's record by others than its run: its start, a
//! client's cancel or resume, an operator's cancel or fail; and the engine as
//! the domain's [`Runner`].
//!
//! A change is committed like a run's step: a transition and the execution's
//! record in one commit that expects the record's last version (see
//! [`commit_ops`]), so a change and a run's step never both land on the same
//! state; the loser re-reads.

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use uuid::Uuid;

use super::engine::Engine;
use super::key::TransitionKey;
use super::records::{
    ACTIVE_SCOPE, ExecutionData, StoredPlace, StoredSnapshot, TransitionData, active_marker, commit_ops,
    execution_of, read,
};
use crate::api::types::{Execution, ExecutionStatus, Metadata, Task, TransitionType};
use crate::app::executions::Runner;
use crate::app::records::{RETRIES, encode};
use crate::app::stored::StoredToolDef;
use crate::app::{App, Error, NotFound, Result, Tenant};
use crate::store::{Direction, Expect, Kind, ListQuery, Op, Record, SortBy, StoreError};

#[async_trait::async_trait]
impl Runner for Engine {
    async fn start(
        &self,
        t: Tenant,
        task_rec: Record,
        task: Task,
        input: Map<String, Value>,
        metadata: Option<Metadata>,
    ) -> Result<Execution> {
        let app = &self.app;
        let max = self.config.max_active_per_tenant;
        // Whether the tenant has a `max`-th execution under way is a scan of
        // its markers; one far from the limit lets the next starts skip it.
        if !self.take_cap_room(t) {
            let (last, far) = (
                ListQuery::oldest_first(max - 1, 1),
                ListQuery::oldest_first((max - max / 10).saturating_sub(1), 1),
            );
            let marker = |q| app.store.list(t.0, Kind::ActiveExecution, ACTIVE_SCOPE, q);
            if !marker(&last).await?.is_empty() {
                return Err(Error::RateLimited {
                    message: format!(
                        "this tenant has {max} executions under way (queued, running, sleeping or awaiting \
                         input): the limit of executions.max_active_per_tenant; wait for some to end, or cancel some"
                    ),
                    retry_after: None,
                });
            }
            // Fewer than `max - slack` under way: the next `slack` starts stay within the limit.
            let slack = max / 10;
            if slack > 0 && marker(&far).await?.is_empty() {
                self.give_cap_room(t, slack);
            }
        }
        let task_id = task_rec.id;
        let agent = app.load(t, Kind::Agent, task.agent_id).await?;
        let tools = super::prompt::task_tools(app, t, &task).await?;
        let snapshot = StoredSnapshot {
            task: task_rec,
            agent,
            tools: tools.into_iter().map(StoredToolDef::from).collect(),
        };
        let mut rec = Record::fresh(Kind::Execution, task_id, encode(&ExecutionData::new(input))?);
        rec.metadata = metadata.map(Metadata::into_inner);
        let id = rec.id;
        let snap = Record::new(Kind::ExecutionTask, id, id, encode(&snapshot)?);
        let answer = execution_of(&rec, &read(&rec)?);
        let ops = vec![
            Op::Require { kind: Kind::Task, id: task_id },
            Op::Put { record: rec, expect: Expect::Absent },
            Op::Put { record: snap, expect: Expect::Absent },
            Op::Put { record: active_marker(id), expect: Expect::Absent },
        ];
        app.store.commit(t.0, ops).await?;
        self.run(t, id);
        Ok(answer)
    }

    async fn cancel(&self, t: Tenant, id: Uuid, reason: Option<String>) -> Result<Execution> {
        let (execution, _) = change(&self.app, t, id, Intervention::Cancel(reason)).await?;
        self.changed();
        self.abort(id);
        Ok(execution)
    }

    async fn resume(&self, t: Tenant, id: Uuid, input: Option<Value>) -> Result<Execution> {
        let (execution, _) = change(&self.app, t, id, Intervention::Resume(input)).await?;
        self.changed();
        self.run(t, id);
        Ok(execution)
    }

    fn watch(&self) -> watch::Receiver<u64> {
        Engine::watch(self)
    }
}

impl Engine {
    /// [`Engine::enqueue`], from `&self` (nothing runs once the engine is dropped).
    fn run(&self, t: Tenant, id: Uuid) {
        if let Some(engine) = self.me.upgrade() {
            engine.enqueue(t, id);
        }
    }
}

/// Cancels or fails an execution under way, found by its id alone (in any
/// tenant): what `agent-platform executions cancel|fail` does, with no
/// engine in this process. On a shared store, the server running it loses
/// its lease by this commit and stops the run at once. 404 when no
/// execution of that id is under way; 409 for a change the status table forbids.
pub async fn end_by_operator(
    app: &App,
    id: Uuid,
    fail: bool,
    reason: Option<String>,
) -> Result<(Tenant, Execution)> {
    let markers = app.store.scan_kind(Kind::ActiveExecution).await?;
    let Some((tenant, _)) = markers.into_iter().find(|(_, marker)| marker.id == id) else {
        return Err(Error::NotFound(NotFound::ExecutionUnderWay { id }));
    };
    let t = Tenant(tenant);
    let change_of = if fail { Intervention::Fail(reason) } else { Intervention::Cancel(reason) };
    let (execution, _) = change(app, t, id, change_of).await?;
    Ok((t, execution))
}

/// A change of an execution by someone other than its run.
enum Intervention {
    /// A client's or an operator's cancel, with its reason.
    Cancel(Option<String>),
    /// An operator's fail, with its reason.
    Fail(Option<String>),
    /// A client's resume of an execution awaiting input, with the input.
    Resume(Option<Value>),
}

/// Commits a change of an execution by someone other than its run.
async fn change(
    app: &App,
    t: Tenant,
    id: Uuid,
    change: Intervention,
) -> Result<(Execution, ExecutionStatus)> {
    for _ in 0..RETRIES {
        let mut rec = app.load(t, Kind::Execution, id).await?;
        let mut data: ExecutionData = read(&rec)?;
        let from = data.status();
        let (to, transition) = match &change {
            Intervention::Cancel(reason) => {
                if !ExecutionStatus::Cancelled.allowed_from(from) {
                    return Err(forbidden(from, ExecutionStatus::Cancelled));
                }
                let reason = reason.clone();
                let output = reason.as_ref().map_or(Value::Null, |r| json!({ "reason": r }));
                data.error = Some(reason.unwrap_or_else(|| "cancelled".into()));
                let last = last_transition(app, t, id).await?;
                let current =
                    last.map_or_else(|| StoredPlace { workflow: "main".into(), step: 0 }, |l| l.current);
                let t = TransitionData {
                    kind: TransitionType::Cancelled.into(),
                    output,
                    current,
                    next: None,
                    key: TransitionKey::Cancelled.to_string(),
                    resume_state: None,
                };
                (ExecutionStatus::Cancelled, t)
            }
            Intervention::Fail(reason) => {
                if !ExecutionStatus::Failed.allowed_from(from) {
                    return Err(Error::Conflict(format!(
                        "execution {id} is {}: only one that is starting or running can be failed; cancel it instead",
                        from.as_str()
                    )));
                }
                let Some(last) = last_transition(app, t, id).await? else {
                    // Started but nothing committed yet: try again.
                    continue;
                };
                let error = reason
                    .clone()
                    .unwrap_or_else(|| "failed by an operator (agent-platform executions fail)".into());
                data.error = Some(error.clone());
                let t = TransitionData {
                    kind: TransitionType::Error.into(),
                    output: json!({ "error": error }),
                    current: last.next.unwrap_or(last.current),
                    next: None,
                    key: TransitionKey::Error.to_string(),
                    resume_state: None,
                };
                (ExecutionStatus::Failed, t)
            }
            Intervention::Resume(input) => {
                if from != ExecutionStatus::AwaitingInput {
                    return Err(Error::Conflict(format!(
                        "execution {id} is {}: only one that is awaiting_input can be resumed (to running)",
                        from.as_str()
                    )));
                }
                let Some(wait) =
                    last_transition(app, t, id).await?.filter(|w| w.kind == TransitionType::Wait.into())
                else {
                    // Between a run's commit of its status and of its wait: try again.
                    continue;
                };
                let key = match wait.key.parse::<TransitionKey>() {
                    Ok(TransitionKey::Wait(paused)) => TransitionKey::Resume(paused),
                    _ => {
                        return Err(Error::Internal(format!(
                            "execution {id} waits at '{}', which is not the key of a wait",
                            wait.key
                        )));
                    }
                };
                let t = TransitionData {
                    kind: TransitionType::Resume.into(),
                    output: input.clone().unwrap_or(Value::Null),
                    current: wait.current.clone(),
                    next: wait.resume_state.and_then(|paused| paused.next),
                    key: key.to_string(),
                    resume_state: None,
                };
                (ExecutionStatus::Running, t)
            }
        };
        data.advance(transition.kind.into());
        if to.is_terminal() {
            data.timers.clear();
            data.asleep_until = None;
            data.in_flight = None;
        }
        let ops = commit_ops(app.store.as_ref(), t.0, &mut rec, &data, &[transition]).await?;
        match app.store.commit(t.0, ops).await {
            Ok(()) => {}
            Err(StoreError::Stale) => continue,
            Err(e) => return Err(e.into()),
        }
        return Ok((execution_of(&rec, &data), to));
    }
    Err(StoreError::Stale.into())
}

/// The execution's last transition, if any.
async fn last_transition(app: &App, t: Tenant, id: Uuid) -> Result<Option<TransitionData>> {
    let q = ListQuery {
        limit: 1,
        offset: 0,
        sort_by: SortBy::CreatedAt,
        direction: Direction::Desc,
        ..ListQuery::default()
    };
    let page = app.store.list(t.0, Kind::Transition, id, &q).await?;
    page.first().map(read).transpose()
}

fn forbidden(from: ExecutionStatus, to: ExecutionStatus) -> Error {
    Error::Conflict(format!("an execution cannot go from {} to {}", from.as_str(), to.as_str()))
}
