//! Executions of tasks: start, read, list, cancel or resume, and their
//! transitions. The engine that runs them is [`crate::exec`].
//!
//! A client's change of an execution (a cancel, a resume) is committed like a
//! run's: a transition and the execution's record in one commit that expects
//! the record's last version, so a change and a run's step never both land
//! on the same state; the loser re-reads.

use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::{Value, json};
use uuid::Uuid;

use super::records::{RETRIES, encode};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::error::LocPart;
use crate::api::types::{
    CreateExecutionRequest, Execution, ExecutionStatus, Metadata, RequestedStatus, Task, Transition,
    TransitionType, UpdateExecutionRequest,
};
use crate::api::validate::{Issues, Source, check_against_schema};
use crate::app::stored::StoredToolDef;
use crate::exec::records::{
    ACTIVE_SCOPE, ExecutionData, StoredPlace, StoredSnapshot, TransitionData, active_marker, commit_ops,
    execution_of, read, transition_of,
};
use crate::store::{Direction, Expect, Kind, ListQuery, Op, Record, SortBy, StoreError};

/// How long a stream of transitions waits for news before it looks again by
/// itself (a commit by another server wakes it only through the store's changes).
const FOLLOW_POLL: Duration = Duration::from_secs(1);

impl App {
    async fn execution_record(&self, t: Tenant, id: Uuid) -> Result<(Record, ExecutionData)> {
        let rec = self.load(t, Kind::Execution, id).await?;
        let data = read(&rec)?;
        Ok((rec, data))
    }

    /// Starts an execution of a task (201): `input` is checked against the
    /// task's `input_schema` (a 422 at `["body","input",…]`). A tenant with
    /// `executions.max_active_per_tenant` executions under way (not ended) is
    /// answered 429 (concurrent starts may pass the limit by their number).
    pub async fn execution_start(
        &self,
        t: Tenant,
        task_id: Uuid,
        req: CreateExecutionRequest,
    ) -> Result<Execution> {
        let engine = self.engine()?;
        let task_rec = self.load(t, Kind::Task, task_id).await?;
        let task: Task = super::records::decode(&task_rec)?;
        if let Some(schema) = &task.input_schema {
            let mut issues = Issues::new(Source::Body);
            let input = Value::Object(req.input.clone());
            check_against_schema(
                &Value::Object(schema.clone()),
                &input,
                &[LocPart::Key("input".into())],
                &mut issues,
            );
            if !issues.is_empty() {
                return Err(Error::Validation(issues.into_vec()));
            }
        }
        let max = engine.config.max_active_per_tenant;
        // Whether the tenant has a `max`-th execution under way is a scan of
        // its markers; one far from the limit lets the next starts skip it.
        if !engine.take_cap_room(t) {
            let (last, far) = (
                ListQuery::oldest_first(max - 1, 1),
                ListQuery::oldest_first((max - max / 10).saturating_sub(1), 1),
            );
            let marker = |q| self.store.list(t.0, Kind::ActiveExecution, ACTIVE_SCOPE, q);
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
                engine.give_cap_room(t, slack);
            }
        }
        let agent = self.load(t, Kind::Agent, task.agent_id).await?;
        let tools = crate::exec::prompt::task_tools(self, t, &task).await?;
        let snapshot = StoredSnapshot {
            task: task_rec,
            agent,
            tools: tools.into_iter().map(StoredToolDef::from).collect(),
        };
        let mut rec = Record::fresh(Kind::Execution, task_id, encode(&ExecutionData::new(req.input))?);
        rec.metadata = req.metadata.map(Metadata::into_inner);
        let id = rec.id;
        let snap = Record::new(Kind::ExecutionTask, id, id, encode(&snapshot)?);
        let answer = execution_of(&rec, &read(&rec)?);
        let ops = vec![
            Op::Require { kind: Kind::Task, id: task_id },
            Op::Put { record: rec, expect: Expect::Absent },
            Op::Put { record: snap, expect: Expect::Absent },
            Op::Put { record: active_marker(id), expect: Expect::Absent },
        ];
        self.store.commit(t.0, ops).await?;
        engine.enqueue(t, id);
        Ok(answer)
    }

    /// The task's executions (404 if the task does not exist).
    pub async fn execution_list(&self, t: Tenant, task: Uuid, q: &ListQuery) -> Result<Vec<Execution>> {
        self.load(t, Kind::Task, task).await?;
        let page = self.store.list(t.0, Kind::Execution, task, q).await?;
        page.iter().map(|rec| Ok(execution_of(rec, &read(rec)?))).collect()
    }

    pub async fn execution_get(&self, t: Tenant, id: Uuid) -> Result<Execution> {
        let (rec, data) = self.execution_record(t, id).await?;
        Ok(execution_of(&rec, &data))
    }

    /// Cancels, or resumes with input (a change the status table forbids is a 409).
    pub async fn execution_update(
        &self,
        t: Tenant,
        id: Uuid,
        req: UpdateExecutionRequest,
    ) -> Result<Execution> {
        let engine = self.engine()?;
        let change = match req.status {
            RequestedStatus::Cancelled => Change::Cancel(req.reason),
            RequestedStatus::Running => Change::Resume(req.input),
        };
        let (execution, to) = self.execution_change(t, id, change).await?;
        engine.changed();
        match to {
            ExecutionStatus::Cancelled => engine.abort(id),
            _ => engine.enqueue(t, id),
        }
        Ok(execution)
    }

    /// Cancels or fails an execution under way, found by its id alone (in any
    /// tenant): what `agent-platform executions cancel|fail` does, with no
    /// engine in this process. On a shared store, the server running it loses
    /// its lease by this commit and stops the run at once. 404 when no
    /// execution of that id is under way; 409 for a change the status table forbids.
    pub async fn execution_end_by_operator(
        &self,
        id: Uuid,
        fail: bool,
        reason: Option<String>,
    ) -> Result<(Tenant, Execution)> {
        let markers = self.store.scan_kind(Kind::ActiveExecution).await?;
        let Some((tenant, _)) = markers.into_iter().find(|(_, marker)| marker.id == id) else {
            return Err(Error::NotFound(NotFound::ExecutionUnderWay { id }));
        };
        let t = Tenant(tenant);
        let change = if fail { Change::Fail(reason) } else { Change::Cancel(reason) };
        let (execution, _) = self.execution_change(t, id, change).await?;
        Ok((t, execution))
    }

    /// Commits a change of an execution by someone other than its run.
    async fn execution_change(
        &self,
        t: Tenant,
        id: Uuid,
        change: Change,
    ) -> Result<(Execution, ExecutionStatus)> {
        for _ in 0..RETRIES {
            let (mut rec, mut data) = self.execution_record(t, id).await?;
            let from = data.status();
            let (to, transition) = match &change {
                Change::Cancel(reason) => {
                    if !ExecutionStatus::Cancelled.allowed_from(from) {
                        return Err(forbidden(from, ExecutionStatus::Cancelled));
                    }
                    let reason = reason.clone();
                    let output = reason.as_ref().map_or(Value::Null, |r| json!({ "reason": r }));
                    data.error = Some(reason.unwrap_or_else(|| "cancelled".into()));
                    let last = self.last_transition(t, id).await?;
                    let current =
                        last.map_or_else(|| StoredPlace { workflow: "main".into(), step: 0 }, |l| l.current);
                    let t = TransitionData {
                        kind: TransitionType::Cancelled.into(),
                        output,
                        current,
                        next: None,
                        key: "cancelled".into(),
                        resume_state: None,
                    };
                    (ExecutionStatus::Cancelled, t)
                }
                Change::Fail(reason) => {
                    if !ExecutionStatus::Failed.allowed_from(from) {
                        return Err(Error::Conflict(format!(
                            "execution {id} is {}: only one that is starting or running can be failed; cancel it instead",
                            from.as_str()
                        )));
                    }
                    let Some(last) = self.last_transition(t, id).await? else {
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
                        key: "error".into(),
                        resume_state: None,
                    };
                    (ExecutionStatus::Failed, t)
                }
                Change::Resume(input) => {
                    if from != ExecutionStatus::AwaitingInput {
                        return Err(Error::Conflict(format!(
                            "execution {id} is {}: only one that is awaiting_input can be resumed (to running)",
                            from.as_str()
                        )));
                    }
                    let Some(wait) =
                        self.last_transition(t, id).await?.filter(|w| w.kind == TransitionType::Wait.into())
                    else {
                        // Between a run's commit of its status and of its wait: try again.
                        continue;
                    };
                    let t = TransitionData {
                        kind: TransitionType::Resume.into(),
                        output: input.clone().unwrap_or(Value::Null),
                        current: wait.current.clone(),
                        next: wait.resume_state.and_then(|paused| paused.next),
                        key: format!("{}/resume", wait.key),
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
            let ops = commit_ops(self.store.as_ref(), t.0, &mut rec, &data, &[transition]).await?;
            match self.store.commit(t.0, ops).await {
                Ok(()) => {}
                Err(StoreError::Stale) => continue,
                Err(e) => return Err(e.into()),
            }
            return Ok((execution_of(&rec, &data), to));
        }
        Err(StoreError::Stale.into())
    }

    /// The execution's last transition, if any.
    async fn last_transition(&self, t: Tenant, id: Uuid) -> Result<Option<TransitionData>> {
        let q = ListQuery {
            limit: 1,
            offset: 0,
            sort_by: SortBy::CreatedAt,
            direction: Direction::Desc,
            ..ListQuery::default()
        };
        let page = self.store.list(t.0, Kind::Transition, id, &q).await?;
        page.first().map(read).transpose()
    }

    /// The execution's transitions, in the order asked for (oldest first by default).
    pub async fn transition_list(
        &self,
        t: Tenant,
        execution: Uuid,
        q: &ListQuery,
    ) -> Result<Vec<Transition>> {
        self.execution_record(t, execution).await?;
        let page = self.store.list(t.0, Kind::Transition, execution, q).await?;
        page.iter().map(|rec| Ok(transition_of(rec, &read(rec)?))).collect()
    }

    pub async fn transition_get(&self, t: Tenant, execution: Uuid, id: Uuid) -> Result<Transition> {
        self.execution_record(t, execution).await?;
        let rec = self.load_in(t, Kind::Transition, execution, id).await?;
        Ok(transition_of(&rec, &read(&rec)?))
    }

    /// How many tasks follow transitions for [`App::transition_follow`]'s
    /// streams now: each lasts until its execution ends or its stream is dropped.
    pub fn transition_followers(&self) -> usize {
        self.followers.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every transition after `after` (all of them when `None`), then each new
    /// one as it commits; the stream ends after a terminal transition, and
    /// stops following once it is dropped. 404 (before the stream starts) when
    /// the execution does not exist.
    pub async fn transition_follow(
        &self,
        t: Tenant,
        execution: Uuid,
        after: Option<Uuid>,
    ) -> Result<BoxStream<'static, Result<Transition>>> {
        self.execution_record(t, execution).await?;
        // Each page goes on after the last transition read, the first one after
        // `after`. An id that is not one of this execution's transitions resumes
        // nothing: all are sent.
        let mut q = ListQuery::oldest_first(0, 1000);
        if let Some(id) = after {
            match self.load_in(t, Kind::Transition, execution, id).await {
                Ok(rec) => q = q.after_record(&rec),
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let mut changes = self.engine()?.watch();
        let app = self.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Transition>>(64);
        let following = Following::new(&self.followers);
        tokio::spawn(async move {
            let _following = following;
            loop {
                changes.mark_unchanged();
                // Read before the page: once it has ended, the page holds its last transition.
                let ended = matches!(app.execution_record(t, execution).await, Ok((_, d)) if d.status().is_terminal());
                let page = match app.store.list(t.0, Kind::Transition, execution, &q).await {
                    Ok(page) => page,
                    Err(e) => return drop(tx.send(Err(e.into())).await),
                };
                if let Some(last) = page.last() {
                    q = q.after_record(last);
                }
                for rec in &page {
                    let transition = match read::<TransitionData>(rec) {
                        Ok(d) => transition_of(rec, &d),
                        Err(e) => return drop(tx.send(Err(e)).await),
                    };
                    let end = transition.kind.is_terminal();
                    // Waits while the client reads slowly: at most a channel's worth is held.
                    if tx.send(Ok(transition)).await.is_err() || end {
                        return;
                    }
                }
                if page.len() == 1000 {
                    continue;
                }
                if ended {
                    return;
                }
                // Nothing new: wait for a commit, the client to leave, or a while.
                tokio::select! {
                    _ = changes.changed() => {}
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(FOLLOW_POLL) => {}
                }
            }
        });
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        Ok(Box::pin(stream))
    }
}

/// A change of an execution by someone other than its run.
enum Change {
    /// A client's or an operator's cancel, with its reason.
    Cancel(Option<String>),
    /// An operator's fail, with its reason.
    Fail(Option<String>),
    /// A client's resume of an execution awaiting input, with the input.
    Resume(Option<Value>),
}

fn forbidden(from: ExecutionStatus, to: ExecutionStatus) -> Error {
    Error::Conflict(format!("an execution cannot go from {} to {}", from.as_str(), to.as_str()))
}

/// Counts a task following transitions while it lives (see [`App::transition_followers`]).
struct Following(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Following {
    fn new(count: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Following(count.clone())
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
