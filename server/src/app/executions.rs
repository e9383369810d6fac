//! Executions of tasks: start, read, list, cancel or resume, and their
//! transitions.
//!
//! The domain reads executions ([`stored`]); what writes them is the engine
//! that runs them, which the server installs as this application's
//! [`Runner`] ([`App::install_runner`]): their start, every step of their
//! runs, a cancel and a resume all commit through it.

pub mod stored;

use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::{Map, Value};
use uuid::Uuid;

use self::stored::{ExecutionData, TransitionData, execution_of, read, transition_of};
use super::{App, Error, Result, Tenant};
use crate::api::error::LocPart;
use crate::api::types::{
    CreateExecutionRequest, Execution, Metadata, RequestedStatus, Task, Transition, UpdateExecutionRequest,
};
use crate::api::validate::{Issues, Source, check_against_schema};
use crate::store::{Kind, ListQuery, Record};

/// How long a stream of transitions waits for news before it looks again by
/// itself (a commit by another server wakes it only through the store's changes).
const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// What the domain needs of the engine that runs executions. The engine
/// implements it, and owns every write of an execution's record: a start,
/// its runs' steps, a cancel and a resume each commit a transition with the
/// record, expecting the record's last version, so that no two of them land
/// on the same state.
#[async_trait::async_trait]
pub trait Runner: Send + Sync {
    /// Commits a new execution of `task` (`task_rec` as read) with `input`,
    /// and a snapshot of the task, its agent and their tools as they are now
    /// (later edits do not change what it runs), then runs it. 429 when the
    /// tenant has `executions.max_active_per_tenant` executions under way
    /// (not ended); 404 when the task or its agent is gone.
    async fn start(
        &self,
        t: Tenant,
        task_rec: Record,
        task: Task,
        input: Map<String, Value>,
        metadata: Option<Metadata>,
    ) -> Result<Execution>;

    /// Cancels an execution, with a reason, and stops its run at once (an
    /// in-flight step is dropped). 409 when it has ended.
    async fn cancel(&self, t: Tenant, id: Uuid, reason: Option<String>) -> Result<Execution>;

    /// Resumes an execution awaiting input with `input` (the waiting step's
    /// output), and runs it. 409 when it does not await input.
    async fn resume(&self, t: Tenant, id: Uuid, input: Option<Value>) -> Result<Execution>;

    /// A receiver that sees every later commit of a transition in this process.
    fn watch(&self) -> tokio::sync::watch::Receiver<u64>;
}

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
        let runner = self.runner()?;
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
        runner.start(t, task_rec, task, req.input, req.metadata).await
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
        let runner = self.runner()?;
        match req.status {
            RequestedStatus::Cancelled => runner.cancel(t, id, req.reason).await,
            RequestedStatus::Running => runner.resume(t, id, req.input).await,
        }
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
        let mut changes = self.runner()?.watch();
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
