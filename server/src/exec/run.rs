//! One run of an execution: the interpreter of a task's steps.
//!
//! A run starts from the task's first step every time, and replays: every
//! transition the execution committed is keyed by the step it records (its
//! path through workflows, branches and items: `main[3].foreach[2][0]`, see
//! [`super::key`]), so a step whose transition is already committed answers
//! its recorded output instead of running again. What a run did before a stop is thus never done
//! twice, and a transition is never committed twice; the step that was in
//! flight at the stop (nothing committed for it yet) runs again.
//!
//! Each commit writes the new transitions and the execution's record in one
//! atomic, durable commit that expects the record's last version: a writer
//! elsewhere (a cancel) makes it stale, and the run stops.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::{BoxFuture, try_join_all};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Map, Value, json};
use tokio::sync::OwnedSemaphorePermit;
use uuid::Uuid;

use super::engine::Engine;
use super::expr::{Context, Evaluator, offload};
use super::key::{ListKey, Pause, StepKey, TransitionKey, WaitKey};
use super::prompt::{Outcome, StepEnv, prompt_step, tool_call_step};
use super::records::{ExecutionData, Paused, Snapshot, StoredSnapshot, TransitionData, commit_ops, read};
use crate::api::types::{
    Expr, Step, Template, TransitionTarget, TransitionType, Workflows, parse_workflows, type_name,
};

use crate::app::{Error, Tenant};
use crate::store::{Kind, ListQuery, Record, StoreError, now};

/// Why a run stopped before its end.
#[derive(Debug)]
pub enum Stop {
    /// The execution waits for input (`awaiting_input`): a resume starts a new run.
    Suspended,
    /// A step failed: the run commits an `error` transition with this message.
    Failed(String),
    /// The execution changed elsewhere (cancelled, or finished by another run).
    Gone,
    /// The execution's record is not the version this run last wrote: a
    /// cancel, or a commit of this run whose answer was dropped (a concurrent
    /// branch failing drops its siblings mid-commit). A new run reads the
    /// store again and replays: it ends at once if the execution has ended.
    Reload,
    /// The store could not write or read: the run is tried again later.
    Store(Error),
    /// The execution sleeps until then, with nothing else to run: the run is
    /// dropped, and the engine runs it again when it is due.
    Asleep(chrono::DateTime<chrono::Utc>),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Store(e.into())
    }
}

type Flowing<T> = Result<T, Stop>;

/// The most bytes (as JSON) a step's output may take: every transition is
/// kept in memory by the run that replays it.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;
/// The most bytes (as JSON) the values of `set` steps may take together.
pub const MAX_STATE_BYTES: usize = 1 << 20;

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// What a list of steps ends with.
enum Flow {
    /// Its last step's output.
    Next(Value),
    /// A `return`: the workflow ends with this value.
    Return(Value),
}

impl Flow {
    fn value(self) -> Value {
        match self {
            Flow::Next(v) | Flow::Return(v) => v,
        }
    }
}

/// A transition to commit.
struct Emit {
    kind: TransitionType,
    key: TransitionKey,
    output: Value,
    current: TransitionTarget,
    next: Option<TransitionTarget>,
    resume_state: Option<Paused>,
}

/// The steps an `if` or a `switch` chose.
#[derive(Clone, Copy)]
enum Branch {
    Then,
    Else,
    Case(usize),
}

impl Branch {
    /// Its list's place, after the step's (`main[0].then`).
    fn place(self) -> String {
        match self {
            Branch::Then => "then".into(),
            Branch::Else => "else".into(),
            Branch::Case(c) => format!("switch[{c}]"),
        }
    }

    /// Its list's key, after the step's.
    fn list(self, step: &StepKey) -> ListKey {
        match self {
            Branch::Then => step.then(),
            Branch::Else => step.otherwise(),
            Branch::Case(c) => step.case(c),
        }
    }
}

/// A committed transition, as the run knows it.
struct Entry {
    kind: TransitionType,
    output: Value,
    resume_state: Option<Paused>,
}

/// The execution's record and committed transitions, as of the last commit.
struct Journal {
    record: Record,
    data: ExecutionData,
    entries: HashMap<String, Entry>,
    /// Where the execution is: the last commit's `next`, else its `current`.
    at: TransitionTarget,
}

/// A list of steps being run: its place for users, its key for the journal,
/// and whether its outputs are its workflow's `outputs`.
#[derive(Clone)]
struct ListAt {
    place: String,
    key: ListKey,
    top: bool,
    /// How many lists this one is nested in (`main` is 0): see `executions.max_depth`.
    depth: usize,
}

/// One call of a workflow (`main`, or a yielded one): its outputs so far, a
/// JSON array shared with the contexts of its steps (a push copies it only
/// while a context of another branch still holds it).
struct Workflow {
    outputs: parking_lot::Mutex<Arc<Value>>,
}

impl Default for Workflow {
    fn default() -> Self {
        Workflow { outputs: parking_lot::Mutex::new(Arc::new(Value::Array(Vec::new()))) }
    }
}

impl Workflow {
    fn push(&self, output: Value) {
        if let Value::Array(outputs) = Arc::make_mut(&mut *self.outputs.lock()) {
            outputs.push(output);
        }
    }
}

pub struct Run {
    engine: Arc<Engine>,
    pub tenant: Tenant,
    pub id: Uuid,
    snapshot: Snapshot,
    /// The task's steps, or why they cannot run.
    workflows: Result<Workflows, String>,
    journal: tokio::sync::Mutex<Journal>,
    input: Arc<Value>,
    execution: Arc<Value>,
    agent: Arc<Value>,
    task: Arc<Value>,
    /// The engine's slot this run holds; given back while it sleeps.
    slot: parking_lot::Mutex<Option<OwnedSemaphorePermit>>,
}

impl Drop for Run {
    fn drop(&mut self) {
        self.engine.loaded.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn target(workflow: &str, step: usize) -> TransitionTarget {
    TransitionTarget { workflow: workflow.to_owned(), step: step as i64 }
}

/// JSON truthiness, as Python and Jinja read it.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

impl Run {
    /// Loads an execution to run: its record, snapshot and transitions.
    /// `None` when there is nothing to run (gone, or already ended);
    /// [`Stop::Asleep`], loading nothing more, when it sleeps until later.
    pub async fn load(
        engine: Arc<Engine>,
        tenant: Tenant,
        id: Uuid,
        slot: OwnedSemaphorePermit,
    ) -> Flowing<Option<Run>> {
        let store = &engine.app.store;
        let Some(record) = store.get(tenant.0, Kind::Execution, id).await? else { return Ok(None) };
        let data: ExecutionData = read(&record).map_err(Stop::Store)?;
        if data.status().is_terminal() {
            return Ok(None);
        }
        if let Some(due) = data.asleep_until
            && due > now()
        {
            return Err(Stop::Asleep(due));
        }
        let Some(snap) = store.get(tenant.0, Kind::ExecutionTask, id).await? else {
            return Err(Stop::Failed(format!("execution {id} has no snapshot of its task")));
        };
        let snapshot: Snapshot =
            read::<StoredSnapshot>(&snap).and_then(|s| s.snapshot()).map_err(Stop::Store)?;
        let mut entries = HashMap::new();
        let mut at = target("main", 0);
        let mut q = ListQuery::oldest_first(0, 1000);
        loop {
            let page = store.list(tenant.0, Kind::Transition, id, &q).await?;
            for rec in &page {
                let t: TransitionData = read(rec).map_err(Stop::Store)?;
                at = t.next.clone().unwrap_or_else(|| t.current.clone()).into();
                entries.insert(
                    t.key,
                    Entry { kind: t.kind.into(), output: t.output, resume_state: t.resume_state },
                );
            }
            match page.last() {
                Some(last) if page.len() == q.limit => q = q.after_record(last),
                _ => break,
            }
        }
        let workflows = parse_workflows(&snapshot.task.main, &snapshot.task.workflows)
            .map_err(|e| format!("the task's steps cannot run: {e}"));
        let input = Arc::new(Value::Object(data.input.clone()));
        let execution = Arc::new(json!({"id": id, "task_id": record.scope}));
        let agent = Arc::new(serde_json::to_value(&snapshot.agent).unwrap_or(Value::Null));
        let task = Arc::new(serde_json::to_value(&snapshot.task).unwrap_or(Value::Null));
        engine.loaded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(Run {
            engine,
            tenant,
            id,
            snapshot,
            workflows,
            journal: tokio::sync::Mutex::new(Journal { record, data, entries, at }),
            input,
            execution,
            agent,
            task,
            slot: parking_lot::Mutex::new(Some(slot)),
        }))
    }

    /// Runs the execution to its end, or until it waits for input.
    pub async fn run(&self) -> Flowing<()> {
        let main_len = self.workflows.as_ref().ok().and_then(|w| w.workflows.get("main")).map_or(0, Vec::len);
        let outcome = self.run_main().await;
        let ended = match outcome {
            Ok(value) => {
                let at = target("main", main_len.saturating_sub(1));
                let finish = Emit {
                    kind: TransitionType::Finish,
                    key: TransitionKey::Finish,
                    output: value.clone(),
                    current: at,
                    next: None,
                    resume_state: None,
                };
                self.commit(vec![finish], move |d| d.output = Some(value)).await
            }
            Err(Stop::Failed(msg)) => self.fail(msg).await,
            Err(other) => Err(other),
        };
        match ended {
            Ok(_) => Ok(()),
            // A limit reached by the last commit itself.
            Err(Stop::Failed(msg)) => self.fail(msg).await.map(drop),
            Err(other) => Err(other),
        }
    }

    async fn run_main(&self) -> Flowing<Value> {
        self.begin().await?;
        let init = Emit {
            kind: TransitionType::Init,
            key: TransitionKey::Init,
            output: (*self.input).clone(),
            current: target("main", 0),
            next: Some(target("main", 0)),
            resume_state: None,
        };
        self.commit(vec![init], |_| {}).await?;
        let workflows = self.workflows.as_ref().map_err(|e| Stop::Failed(e.clone()))?;
        let main = workflows.workflows.get("main").map(Vec::as_slice).unwrap_or_default();
        let at = ListAt { place: "main".into(), key: ListKey::main(), top: true, depth: 0 };
        let wf = Workflow::default();
        Ok(self.run_list(main, &at, (*self.input).clone(), &wf, false).await?.value())
    }

    /// Makes it durable, before any step runs (a replay included), that this
    /// engine works on the execution; counts the servers that stopped in the
    /// middle of its step, and fails it once they reach
    /// `executions.max_step_attempts` instead of running the step again.
    /// A new execution needs no commit here: its `init` is the first.
    async fn begin(&self) -> Flowing<()> {
        let me = self.engine.id;
        let (in_flight, stopped, transitions) = {
            let journal = self.journal.lock().await;
            (journal.data.in_flight, journal.data.stopped_mid_step, journal.data.transitions)
        };
        if in_flight == Some(me) || (in_flight.is_none() && transitions == 0) {
            return Ok(());
        }
        // Another engine's run was working on it: its server died, or lost the lease, mid-step.
        let stopped = stopped + u32::from(in_flight.is_some());
        let max = self.engine.config.max_step_attempts;
        if stopped >= max {
            return Err(Stop::Failed(format!(
                "the server stopped {stopped} times while running this step, so it is not run again \
                 (executions.max_step_attempts = {max})"
            )));
        }
        self.commit(Vec::new(), move |d| d.stopped_mid_step = stopped).await?;
        Ok(())
    }

    /// Commits the `error` transition of a failed run.
    async fn fail(&self, msg: String) -> Flowing<Vec<Value>> {
        let current = self.journal.lock().await.at.clone();
        let error = Emit {
            kind: TransitionType::Error,
            key: TransitionKey::Error,
            output: json!({ "error": msg }),
            current,
            next: None,
            resume_state: None,
        };
        self.commit(vec![error], move |d| d.error = Some(msg)).await
    }

    fn context(&self, last: Value, wf: &Workflow, state: &Map<String, Value>) -> Context {
        Context {
            last: Arc::new(last),
            input: self.input.clone(),
            outputs: wf.outputs.lock().clone(),
            state: Arc::new(Value::Object(state.clone())),
            execution: self.execution.clone(),
            agent: self.agent.clone(),
            task: self.task.clone(),
            results: None,
        }
    }

    async fn ctx(&self, last: Value, wf: &Workflow) -> Context {
        let journal = self.journal.lock().await;
        self.context(last, wf, &journal.data.state)
    }

    /// The recorded transition of `key`, if committed.
    async fn recorded(&self, key: &TransitionKey) -> Option<(TransitionType, Value, Option<Paused>)> {
        let key = key.to_string();
        let journal = self.journal.lock().await;
        journal.entries.get(&key).map(|e| (e.kind, e.output.clone(), e.resume_state.clone()))
    }

    /// Commits `emits` (in order, atomically) with `change` to the execution's
    /// record; answers their outputs. Transitions already committed (a replay)
    /// are not committed again: their recorded outputs are answered.
    async fn commit(&self, emits: Vec<Emit>, change: impl FnOnce(&mut ExecutionData)) -> Flowing<Vec<Value>> {
        let keys: Vec<String> = emits.iter().map(|e| e.key.to_string()).collect();
        let mut journal = self.journal.lock().await;
        if let Some(first) = keys.first()
            && journal.entries.contains_key(first)
        {
            return Ok(keys
                .iter()
                .map(|k| journal.entries.get(k).map(|r| r.output.clone()).unwrap_or(Value::Null))
                .collect());
        }
        if journal.data.status().is_terminal() {
            return Err(Stop::Gone);
        }
        let ending =
            emits.last().is_some_and(|e| matches!(e.kind, TransitionType::Error | TransitionType::Cancelled));
        let max = self.engine.config.max_steps;
        if !ending && journal.data.transitions + emits.len() as u64 > max {
            return Err(Stop::Failed(format!(
                "the execution reached the limit of {max} transitions (executions.max_steps)"
            )));
        }
        for e in &emits {
            let size = json_len(&e.output);
            if size > MAX_OUTPUT_BYTES && !ending {
                return Err(Stop::Failed(format!(
                    "the step's output takes {size} bytes as JSON: more than the limit of {MAX_OUTPUT_BYTES}"
                )));
            }
        }
        let mut data = journal.data.clone();
        // This run goes on working (unless the commit ends it, makes it wait, or `change` says it sleeps).
        data.in_flight = Some(self.engine.id);
        if !emits.is_empty() {
            data.stopped_mid_step = 0;
        }
        change(&mut data);
        let mut transitions = Vec::with_capacity(emits.len());
        for (e, key) in emits.iter().zip(&keys) {
            debug_assert!(
                data.last().is_none_or(|last| last.allows_next(e.kind)),
                "transition {:?} after {:?} at {}",
                e.kind,
                data.last,
                e.key
            );
            transitions.push(TransitionData {
                kind: e.kind.into(),
                output: e.output.clone(),
                current: e.current.clone().into(),
                next: e.next.clone().map(Into::into),
                key: key.clone(),
                resume_state: e.resume_state.clone(),
            });
            data.advance(e.kind);
        }
        if data.status().is_terminal() || data.status() == crate::api::types::ExecutionStatus::AwaitingInput {
            data.in_flight = None;
        }
        let mut record = journal.record.clone();
        let store = self.engine.app.store.as_ref();
        let ops =
            commit_ops(store, self.tenant.0, &mut record, &data, &transitions).await.map_err(Stop::Store)?;
        match store.commit(self.tenant.0, ops).await {
            Ok(()) => {}
            Err(StoreError::Stale) => return Err(Stop::Reload),
            Err(e) => return Err(e.into()),
        }
        record.version += 1;
        journal.record = record;
        journal.data = data;
        if let Some(e) = emits.last() {
            journal.at = e.next.clone().unwrap_or_else(|| e.current.clone());
        }
        for (e, key) in emits.iter().zip(keys) {
            journal.entries.insert(
                key,
                Entry { kind: e.kind, output: e.output.clone(), resume_state: e.resume_state.clone() },
            );
        }
        drop(journal);
        self.engine.changed();
        Ok(emits.into_iter().map(|e| e.output).collect())
    }

    /// Commits a `step` transition and answers its output.
    async fn step_done(
        &self,
        key: StepKey,
        output: Value,
        here: TransitionTarget,
        next: Option<TransitionTarget>,
        change: impl FnOnce(&mut ExecutionData),
    ) -> Flowing<Value> {
        let emit = Emit {
            kind: TransitionType::Step,
            key: TransitionKey::Step(key),
            output,
            current: here,
            next,
            resume_state: None,
        };
        let mut out = self.commit(vec![emit], change).await?;
        Ok(out.pop().unwrap_or(Value::Null))
    }

    fn run_list<'a>(
        &'a self,
        steps: &'a [Step],
        at: &'a ListAt,
        first: Value,
        wf: &'a Workflow,
        branch: bool,
    ) -> BoxFuture<'a, Flowing<Flow>> {
        Box::pin(async move {
            let max = self.engine.config.max_depth;
            if at.depth > max {
                return Err(Stop::Failed(format!(
                    "at {}: steps nest deeper than the limit of {max} levels (executions.max_depth); \
                     does a workflow yield to itself without end?",
                    at.place
                )));
            }
            let mut last = first;
            for (i, step) in steps.iter().enumerate() {
                match self.run_step(step, at, i, steps.len(), last, wf, branch).await? {
                    Flow::Next(v) => {
                        if at.top {
                            wf.push(v.clone());
                        }
                        last = v;
                    }
                    Flow::Return(v) => return Ok(Flow::Return(v)),
                }
            }
            Ok(Flow::Next(last))
        })
    }

    /// Runs step `i` of the list at `at` (of `n` steps); `last` is `_`.
    /// `branch`: inside a concurrent branch, where nothing may wait for input.
    #[allow(clippy::too_many_arguments)]
    fn run_step<'a>(
        &'a self,
        step: &'a Step,
        at: &'a ListAt,
        i: usize,
        n: usize,
        last: Value,
        wf: &'a Workflow,
        branch: bool,
    ) -> BoxFuture<'a, Flowing<Flow>> {
        Box::pin(async move {
            let key = at.key.step(i);
            let here = target(&at.place, i);
            let next = (i + 1 < n).then(|| target(&at.place, i + 1));
            if let Some((TransitionType::Step, output, _)) =
                self.recorded(&TransitionKey::Step(key.clone())).await
            {
                return Ok(if matches!(step, Step::Return(_)) {
                    Flow::Return(output)
                } else {
                    Flow::Next(output)
                });
            }
            let place = format!("{}[{i}]", at.place);
            self.step_body(step, &place, key, here, next, last, wf, branch, at.depth).await.map_err(|stop| {
                match stop {
                    Stop::Failed(msg) if !msg.starts_with("at ") => {
                        Stop::Failed(format!("at {place} ({}): {msg}", step.kind()))
                    }
                    other => other,
                }
            })
        })
    }

    /// An expression's value, off the async workers when it is slow (see [`offload`]).
    async fn eval(&self, expr: &Expr, ctx: &Context) -> Flowing<Value> {
        offload(&self.engine.eval, expr, ctx, Evaluator::eval).await.map_err(Stop::Failed)
    }

    async fn eval_object(&self, pairs: &[(String, Expr)], ctx: &Context) -> Flowing<Value> {
        offload(&self.engine.eval, pairs, ctx, Evaluator::eval_object).await.map_err(Stop::Failed)
    }

    async fn render_text(&self, template: &Template, ctx: &Context) -> Flowing<String> {
        offload(&self.engine.eval, template, ctx, Evaluator::render_text).await.map_err(Stop::Failed)
    }

    fn env<'a>(&'a self, ctx: &'a Context) -> StepEnv<'a> {
        StepEnv {
            app: &self.engine.app,
            tenant: self.tenant,
            agent: &self.snapshot.agent,
            task: &self.snapshot.task,
            execution: self.id,
            tools: &self.snapshot.tools,
            eval: &self.engine.eval,
            ctx,
            policy: &self.engine.policy,
        }
    }

    /// The items a `foreach` or `map_reduce` runs over, within the limit.
    fn items(&self, value: Value, what: &str) -> Flowing<Vec<Value>> {
        let Value::Array(items) = value else {
            return Err(Stop::Failed(format!("{what} must be a list, not {}", type_name(&value))));
        };
        let max = self.engine.config.max_foreach_items;
        if items.len() > max {
            return Err(Stop::Failed(format!(
                "{what} has {} items: more than the limit of {max} (executions.max_foreach_items)",
                items.len()
            )));
        }
        Ok(items)
    }

    /// A wait inside a concurrent branch: nothing could say which branch the input is for.
    fn no_wait_in_branch(branch: bool, what: &str) -> Flowing<()> {
        if branch {
            return Err(Stop::Failed(format!(
                "{what} cannot wait for input inside a parallel branch or a map_reduce with \
                 parallelism > 1; move it out, or use parallelism 1"
            )));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn step_body(
        &self,
        step: &Step,
        place: &str,
        key: StepKey,
        here: TransitionTarget,
        next: Option<TransitionTarget>,
        last: Value,
        wf: &Workflow,
        branch: bool,
        depth: usize,
    ) -> Flowing<Flow> {
        let done = |v| Ok(Flow::Next(v));
        match step {
            Step::Evaluate(pairs) => {
                let ctx = self.ctx(last, wf).await;
                let out = self.eval_object(pairs, &ctx).await?;
                done(self.step_done(key, out, here, next, |_| {}).await?)
            }
            Step::Log(template) => {
                let ctx = self.ctx(last, wf).await;
                let text = self.render_text(template, &ctx).await?;
                done(self.step_done(key, Value::String(text), here, next, |_| {}).await?)
            }
            Step::Get(name) => {
                let value = self.journal.lock().await.data.state.get(name).cloned().unwrap_or(Value::Null);
                done(self.step_done(key, value, here, next, |_| {}).await?)
            }
            Step::Set(pairs) => {
                let ctx = self.ctx(last, wf).await;
                let out = self.eval_object(pairs, &ctx).await?;
                let mut merged = self.journal.lock().await.data.state.clone();
                if let Value::Object(m) = &out {
                    merged.extend(m.clone());
                }
                let size = json_len(&Value::Object(merged));
                if size > MAX_STATE_BYTES {
                    return Err(Stop::Failed(format!(
                        "the values set would take {size} bytes as JSON: more than the limit of {MAX_STATE_BYTES}"
                    )));
                }
                let values = out.clone();
                let change = move |d: &mut ExecutionData| {
                    if let Value::Object(m) = values {
                        d.state.extend(m);
                    }
                };
                done(self.step_done(key, out, here, next, change).await?)
            }
            Step::Error(template) => {
                let ctx = self.ctx(last, wf).await;
                let text = self.render_text(template, &ctx).await?;
                Err(Stop::Failed(format!("at {place} (error): {text}")))
            }
            Step::Return(pairs) => {
                let ctx = self.ctx(last, wf).await;
                let out = self.eval_object(pairs, &ctx).await?;
                Ok(Flow::Return(self.step_done(key, out, here, next, |_| {}).await?))
            }
            Step::If { cond, then, otherwise } => {
                let ctx = self.ctx(last.clone(), wf).await;
                let chosen = if truthy(&self.eval(cond, &ctx).await?) {
                    Some((Branch::Then, then))
                } else {
                    otherwise.as_ref().map(|steps| (Branch::Else, steps))
                };
                self.branch(chosen, place, key, here, next, last, wf, branch, depth).await
            }
            Step::Switch(cases) => {
                let ctx = self.ctx(last.clone(), wf).await;
                let mut chosen = None;
                for (c, (case, steps)) in cases.iter().enumerate() {
                    let hit = match case {
                        None => true,
                        Some(expr) => truthy(&self.eval(expr, &ctx).await?),
                    };
                    if hit {
                        chosen = Some((Branch::Case(c), steps));
                        break;
                    }
                }
                self.branch(chosen, place, key, here, next, last, wf, branch, depth).await
            }
            Step::Foreach { items, body } => {
                let ctx = self.ctx(last, wf).await;
                let items = self.items(self.eval(items, &ctx).await?, "foreach's `in`")?;
                let mut outs = Vec::with_capacity(items.len());
                for (idx, item) in items.into_iter().enumerate() {
                    let at = ListAt {
                        place: format!("{place}.foreach[{idx}]"),
                        key: key.foreach(idx),
                        top: false,
                        depth: depth + 1,
                    };
                    match self.run_list(body, &at, item, wf, branch).await? {
                        Flow::Return(v) => return Ok(Flow::Return(v)),
                        Flow::Next(v) => outs.push(v),
                    }
                }
                done(self.step_done(key, Value::Array(outs), here, next, |_| {}).await?)
            }
            Step::MapReduce { over, map, reduce, initial, parallelism } => {
                let ctx = self.ctx(last, wf).await;
                let items = self.items(self.eval(over, &ctx).await?, "map_reduce's `over`")?;
                let max = self.engine.config.max_parallel_branches;
                if *parallelism as usize > max {
                    return Err(Stop::Failed(format!(
                        "a parallelism of {parallelism}: more than the limit of {max} \
                         (executions.max_parallel_branches)"
                    )));
                }
                let n = items.len();
                let at =
                    ListAt { place: format!("{place}.map"), key: key.map(), top: false, depth: depth + 1 };
                let parallel = *parallelism > 1;
                let runs = items.into_iter().enumerate().map(|(idx, item)| {
                    let at = &at;
                    async move {
                        Ok::<_, Stop>(
                            self.run_step(map, at, idx, n, item, wf, branch || parallel).await?.value(),
                        )
                    }
                });
                let outs: Vec<Value> = if parallel {
                    futures::stream::iter(runs).buffered(*parallelism as usize).try_collect().await?
                } else {
                    let mut outs = Vec::with_capacity(n);
                    for run in runs {
                        outs.push(run.await?);
                    }
                    outs
                };
                let out = match reduce {
                    None => Value::Array(outs),
                    Some(reduce) => {
                        let mut results = Arc::new(initial.clone().unwrap_or_else(|| json!([])));
                        let mut ctx = self.ctx(Value::Null, wf).await;
                        for out in outs {
                            ctx.last = Arc::new(out);
                            ctx.results = Some(results.clone());
                            results = Arc::new(self.eval(reduce, &ctx).await?);
                        }
                        Arc::unwrap_or_clone(results)
                    }
                };
                done(self.step_done(key, out, here, next, |_| {}).await?)
            }
            Step::Parallel(branches) => {
                let max = self.engine.config.max_parallel_branches;
                if branches.len() > max {
                    return Err(Stop::Failed(format!(
                        "{} branches: more than the limit of {max} (executions.max_parallel_branches)",
                        branches.len()
                    )));
                }
                let at = ListAt {
                    place: format!("{place}.parallel"),
                    key: key.parallel(),
                    top: false,
                    depth: depth + 1,
                };
                let n = branches.len();
                let runs = branches.iter().enumerate().map(|(b, step)| {
                    let (at, last) = (&at, last.clone());
                    async move { Ok::<_, Stop>(self.run_step(step, at, b, n, last, wf, true).await?.value()) }
                });
                let outs = try_join_all(runs).await?;
                done(self.step_done(key, Value::Array(outs), here, next, |_| {}).await?)
            }
            Step::Sleep { seconds } => {
                let max = self.engine.config.max_sleep_s;
                if *seconds > max as f64 {
                    return Err(Stop::Failed(format!(
                        "a sleep of {seconds} s: more than the limit of {max} s (executions.max_sleep_s)"
                    )));
                }
                let (timer, asleep) = {
                    let journal = self.journal.lock().await;
                    (journal.data.timers.get(key.as_str()).copied(), journal.data.asleep_until)
                };
                let due = timer
                    .unwrap_or_else(|| now() + chrono::Duration::milliseconds((*seconds * 1000.0) as i64));
                // Outside concurrent branches nothing else runs meanwhile: the
                // run is dropped until the sleep is due (and its lease released).
                if !branch && due > now() {
                    if timer.is_none() || asleep != Some(due) {
                        let timer = key.to_string();
                        self.commit(Vec::new(), move |d| {
                            d.timers.insert(timer, due);
                            d.asleep_until = Some(due);
                            d.in_flight = None;
                            d.stopped_mid_step = 0;
                        })
                        .await?;
                    }
                    return Err(Stop::Asleep(due));
                }
                if timer.is_none() {
                    let timer = key.to_string();
                    self.commit(Vec::new(), move |d| {
                        d.timers.insert(timer, due);
                    })
                    .await?;
                }
                self.sleep_until(due).await;
                let timer = key.to_string();
                done(
                    self.step_done(key, Value::Null, here, next, move |d| {
                        d.timers.remove(&timer);
                        d.asleep_until = None;
                    })
                    .await?,
                )
            }
            Step::WaitForInput { info } => {
                let wait_key = key.wait(Pause::Input);
                if let Some(input) = self.resumed(&wait_key).await? {
                    return done(input);
                }
                Self::no_wait_in_branch(branch, "wait_for_input")?;
                let ctx = self.ctx(last, wf).await;
                let info = self.eval_object(info, &ctx).await?;
                self.wait(wait_key, json!({ "info": info }), here, next, None).await
            }
            Step::ToolCall { tool, arguments } => {
                let wait_key = key.wait(Pause::Call(1));
                if let Some(result) = self.resumed(&wait_key).await? {
                    let out = match result {
                        Value::Object(mut m) if m.contains_key("result") => {
                            m.remove("result").unwrap_or_default()
                        }
                        other => other,
                    };
                    return done(self.step_done(key, out, here, next, |_| {}).await?);
                }
                let ctx = self.ctx(last, wf).await;
                let args = self.eval_object(arguments, &ctx).await?;
                // Boxed (as the prompt step): a step's future is inside its parents'
                // (nested steps, to executions.max_depth), so a large one would grow each level.
                match Box::pin(tool_call_step(&self.env(&ctx), tool, args)).await.map_err(Stop::Failed)? {
                    Outcome::Done(out) => done(self.step_done(key, out, here, next, |_| {}).await?),
                    Outcome::Pause { call, state } => {
                        Self::no_wait_in_branch(branch, "a function tool call")?;
                        self.wait(
                            wait_key,
                            json!({ "tool_call": call }),
                            here.clone(),
                            Some(here),
                            Some(state),
                        )
                        .await
                    }
                }
            }
            Step::Prompt { .. } => {
                // The latest function tool call this step waited for, if any.
                let mut calls = 0;
                while self.recorded(&TransitionKey::Wait(key.wait(Pause::Call(calls + 1)))).await.is_some() {
                    calls += 1;
                }
                let resume = if calls == 0 {
                    None
                } else {
                    let wait_key = key.wait(Pause::Call(calls));
                    let Some(result) = self.resumed(&wait_key).await? else {
                        unreachable!("resumed answers or stops")
                    };
                    let state = self
                        .recorded(&TransitionKey::Wait(wait_key))
                        .await
                        .and_then(|(_, _, paused)| paused?.state);
                    let state = state.unwrap_or(Value::Null);
                    Some((state, result))
                };
                let ctx = self.ctx(last, wf).await;
                match Box::pin(prompt_step(&self.env(&ctx), step, resume)).await.map_err(Stop::Failed)? {
                    Outcome::Done(out) => done(self.step_done(key, out, here, next, |_| {}).await?),
                    Outcome::Pause { call, state } => {
                        Self::no_wait_in_branch(branch, "a function tool call")?;
                        let wait_key = key.wait(Pause::Call(calls + 1));
                        self.wait(
                            wait_key,
                            json!({ "tool_call": call }),
                            here.clone(),
                            Some(here),
                            Some(state),
                        )
                        .await
                    }
                }
            }
            Step::Yield { workflow, arguments } => {
                let found = self.workflows.as_ref().ok().and_then(|w| w.workflows.get(workflow));
                let Some(steps) = found else {
                    return Err(Stop::Failed(format!("the task has no workflow named '{workflow}'")));
                };
                let ctx = self.ctx(last, wf).await;
                let args = self.eval_object(arguments, &ctx).await?;
                let entry = target(workflow, 0);
                let enter = vec![
                    Emit {
                        kind: TransitionType::Step,
                        key: TransitionKey::YieldArgs(key.clone()),
                        output: args.clone(),
                        current: here.clone(),
                        next: Some(entry.clone()),
                        resume_state: None,
                    },
                    Emit {
                        kind: TransitionType::InitBranch,
                        key: TransitionKey::YieldInit(key.clone()),
                        output: args,
                        current: entry.clone(),
                        next: Some(entry),
                        resume_state: None,
                    },
                ];
                let args = self.commit(enter, |_| {}).await?.pop().unwrap_or(Value::Null);
                let at = ListAt {
                    place: workflow.clone(),
                    key: key.yielded(workflow),
                    top: true,
                    depth: depth + 1,
                };
                let sub = Workflow::default();
                let value = self.run_list(steps, &at, args, &sub, branch).await?.value();
                let leave = vec![
                    Emit {
                        kind: TransitionType::FinishBranch,
                        key: TransitionKey::YieldFinish(key.clone()),
                        output: value.clone(),
                        current: target(workflow, steps.len().saturating_sub(1)),
                        next: Some(here.clone()),
                        resume_state: None,
                    },
                    Emit {
                        kind: TransitionType::Step,
                        key: TransitionKey::Step(key),
                        output: value,
                        current: here,
                        next,
                        resume_state: None,
                    },
                ];
                done(self.commit(leave, |_| {}).await?.pop().unwrap_or(Value::Null))
            }
        }
    }

    /// The end of an `if` or a `switch`: runs the steps chosen, or none
    /// (output null), then commits the step.
    #[allow(clippy::too_many_arguments)]
    async fn branch(
        &self,
        chosen: Option<(Branch, &Vec<Step>)>,
        place: &str,
        key: StepKey,
        here: TransitionTarget,
        next: Option<TransitionTarget>,
        last: Value,
        wf: &Workflow,
        branch: bool,
        depth: usize,
    ) -> Flowing<Flow> {
        let out = match chosen {
            Some((chosen, steps)) => {
                let at = ListAt {
                    place: format!("{place}.{}", chosen.place()),
                    key: chosen.list(&key),
                    top: false,
                    depth: depth + 1,
                };
                match self.run_list(steps, &at, last, wf, branch).await? {
                    Flow::Return(v) => return Ok(Flow::Return(v)),
                    Flow::Next(v) => v,
                }
            }
            None => Value::Null,
        };
        Ok(Flow::Next(self.step_done(key, out, here, next, |_| {}).await?))
    }

    /// The input a waiting step was resumed with; `Ok(None)` when it never
    /// waited; [`Stop::Suspended`] while it waits.
    async fn resumed(&self, wait_key: &WaitKey) -> Flowing<Option<Value>> {
        if let Some((_, input, _)) = self.recorded(&TransitionKey::Resume(wait_key.clone())).await {
            return Ok(Some(input));
        }
        if self.recorded(&TransitionKey::Wait(wait_key.clone())).await.is_some() {
            return Err(Stop::Suspended);
        }
        Ok(None)
    }

    /// Commits a `wait`: the execution is `awaiting_input` until a resume.
    /// `resume_at`: where the execution goes on (shown as the `resume`'s `next`).
    async fn wait(
        &self,
        key: WaitKey,
        output: Value,
        here: TransitionTarget,
        resume_at: Option<TransitionTarget>,
        state: Option<Value>,
    ) -> Flowing<Flow> {
        let resume_state = Paused { next: resume_at.map(Into::into), state };
        let emit = Emit {
            kind: TransitionType::Wait,
            key: TransitionKey::Wait(key),
            output,
            current: here,
            next: None,
            resume_state: Some(resume_state),
        };
        self.commit(vec![emit], |_| {}).await?;
        Err(Stop::Suspended)
    }

    /// Waits until `due`, giving the run's slot back meanwhile (a sleeping
    /// execution holds none).
    async fn sleep_until(&self, due: chrono::DateTime<chrono::Utc>) {
        let left = (due - now()).to_std().unwrap_or_default();
        if left.is_zero() {
            return;
        }
        let released = self.slot.lock().take();
        drop(released);
        tokio::time::sleep(left).await;
        let slot = self.engine.slots.clone().acquire_owned().await.ok();
        let mut held = self.slot.lock();
        if held.is_none() {
            *held = slot;
        }
    }
}
