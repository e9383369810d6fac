//! Background responses (`background: true`): the server runs them to their
//! end whether or not anyone waits, and across restarts.
//!
//! Creating one plans it as a foreground response would (every validation
//! error is the request's answer), then commits in one go its input messages,
//! its `response` record (`queued`, `background`) and a [`Kind::Run`] record
//! holding the request, and answers. A run (on this server's pool of
//! `tools.background_runs`) then begins it: it counts the begin durably
//! ([`RunData::begun`]: one begun `executions.max_step_attempts` times, by
//! servers that stopped while it ran, fails instead), marks it
//! `in_progress`, and drives the turn as `POST /v1/responses` does, with a
//! [`RunCheckpoint`] in its rounds: the assistant message that calls the
//! server's tools is committed before they run, their results once they ran,
//! each commit expecting the `Run` record's last version (so a run that was
//! cancelled, or taken over on a shared store, commits nothing more). The
//! end replaces the `response` record and deletes the `Run`, in one commit
//! with the answer.
//!
//! A run that begins again (the server restarted; on a shared store, the
//! server holding its [`Kind::RunLease`] stopped renewing it) plans the turn
//! from the session's history: the calls of the last calling message that no
//! result answers were in flight when the server stopped. Each runs again if
//! its tool is idempotent (`Toolbox::idempotent`), else it is answered
//! "interrupted" (never run twice); then the loop goes on. So no committed
//! result is produced twice, and a call in flight runs again only when that
//! is harmless.
//!
//! Cancelling (`POST /v1/responses/{id}/cancel`) aborts this server's run
//! of it and commits the end `cancelled` (another server's run finds its
//! next commit refused, and stops); failing commits the end `failed` with the
//! error. Either answers the server's calls left in flight ("not run: ..."),
//! so the conversation can go on.
//!
//! Events ([`App::response_follow`]) are a function of what is committed
//! (see `Events::replay`), so the same response's events have the same
//! sequence numbers however often a client attaches.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, broadcast};
use tokio::task::AbortHandle;
use uuid::Uuid;

use super::super::messages::message_records;
use super::super::records::{decode, encode};
use super::super::turn::Driver;
use super::super::turn::convert::history_item;
use super::super::turn::rounds::{After, Checkpoint, tool_message};
use super::super::turn::tools::told;
use super::super::{App, Error, NotFound, Result, Tenant};
use super::events::Events;
use super::{ResponseData, ResponseEvents, Status, StreamFailure, model_response, response_id};
use crate::api::types::{
    ConvId, ConversationItem, ConversationRef, CreateMessageRequest, CreateResponseRequest, Message,
    ModelResponse, PendingApproval, ResponseError, ResponseStreamEvent, Role, Session, SessionRun,
    SessionRunRequest, ToolRun, ToolRunType,
};
use crate::app::lease::{Claim, Leases};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::store::{Change, Expect, Kind, ListQuery, Op, Record, StoreError};

/// How long a run that could not reach the store waits before it begins again.
const STORE_RETRY: Duration = Duration::from_secs(2);
/// How often a follower looks at the store when it heard nothing (another
/// server's commits, on a store that tells none).
const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// What a `Run` record keeps (id: the response's; scope: the nil id, one
/// list per tenant, so that its runs under way are counted).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct RunData {
    /// The session the response is a turn of.
    session: Uuid,
    /// The request as it runs: no `input` (committed at the creation), no
    /// `conversation` or `previous_response_id` (`session` is that), its
    /// `mcp` tools' headers kept.
    request: Value,
    /// What the response shows of its conversation and previous response.
    conversation: Option<Uuid>,
    previous_response_id: Option<String>,
    /// The messages the run committed, in order: its output so far.
    #[serde(default)]
    made: Vec<Uuid>,
    /// The `mcp_list_tools` items of its first begin (the first of its output).
    #[serde(default)]
    listed_tools: Option<Vec<ConversationItem>>,
    /// How many times a server began it.
    #[serde(default)]
    begun: u32,
}

/// The background runs of this server (see the module's docs).
pub struct BackgroundRuns {
    started: std::sync::OnceLock<Started>,
    /// The runs under way here, by response id.
    active: parking_lot::Mutex<HashMap<Uuid, AbortHandle>>,
    /// The id of the response of every commit of a run (here, or heard from
    /// another server); the nil id: any may have changed.
    changed: broadcast::Sender<Uuid>,
    stopping: AtomicBool,
    /// What runs beside the runs: the look for runs to take over, the listener.
    tasks: parking_lot::Mutex<Vec<AbortHandle>>,
}

struct Started {
    slots: Arc<Semaphore>,
    /// On a shared store: which server runs what.
    leases: Option<Arc<Leases>>,
    max_begins: u32,
    /// Background responses a tenant may have under way (`tools.background_max_per_tenant`).
    max_per_tenant: usize,
    log: slog::Logger,
}

impl Default for BackgroundRuns {
    fn default() -> Self {
        BackgroundRuns {
            started: std::sync::OnceLock::new(),
            active: Default::default(),
            changed: broadcast::channel(1024).0,
            stopping: AtomicBool::new(false),
            tasks: Default::default(),
        }
    }
}

impl BackgroundRuns {
    fn changed(&self, id: Uuid) {
        let _ = self.changed.send(id);
    }

    /// How many background responses run on this server now.
    pub fn running(&self) -> usize {
        self.active.lock().len()
    }

    fn abort(&self, id: Uuid) {
        if let Some(run) = self.active.lock().remove(&id) {
            run.abort();
        }
    }

    /// Stops every run (each begins again at the next start, or on another server).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        for (_, run) in self.active.lock().drain() {
            run.abort();
        }
    }
}

/// Whether a tool error from `e` means the run is no longer this server's.
fn run_lost(e: &StoreError) -> bool {
    matches!(e, StoreError::Stale | StoreError::NotFound { kind: Kind::Run, .. })
}

fn lost() -> Error {
    Error::Conflict(
        "the background response is no longer this server's to run: it was cancelled, or another server \
         took it over"
            .into(),
    )
}

fn unreadable(what: &str, id: Uuid, e: serde_json::Error) -> Error {
    Error::Internal(format!("the stored {what} of {} is unreadable: {e}", response_id(id)))
}

/// A background run's commits (see the module's docs).
pub(super) struct RunCheckpoint {
    tenant: Tenant,
    session: Uuid,
    /// The `response` record's version while the run holds it.
    response_version: u64,
    input_messages: Vec<Uuid>,
    state: parking_lot::Mutex<CheckState>,
}

struct CheckState {
    /// The `Run` record as last committed.
    record: Record,
    data: RunData,
    /// The messages committed so far, in order.
    committed: Vec<Message>,
}

impl RunCheckpoint {
    pub(super) fn response_version(&self) -> u64 {
        self.response_version
    }

    /// For the end's commit: the messages committed so far, the response's
    /// input messages, and the deletion of the `Run` (expecting its version).
    pub(super) fn ending(&self) -> (Vec<Message>, Vec<Uuid>, Vec<Op>) {
        let state = self.state.lock();
        let delete = Op::Delete { kind: Kind::Run, id: state.record.id, version: Some(state.record.version) };
        (state.committed.clone(), self.input_messages.clone(), vec![delete])
    }

    fn version(&self) -> u64 {
        self.state.lock().record.version
    }
}

impl Checkpoint for RunCheckpoint {
    fn commit<'a>(
        &'a self,
        app: &'a App,
        messages: Vec<(Uuid, CreateMessageRequest)>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let (ids, messages): (Vec<Uuid>, Vec<CreateMessageRequest>) = messages.into_iter().unzip();
            let (mut made, puts) = message_records(self.session, messages).await?;
            let mut ops = vec![app.session_changes(self.session)];
            for ((op, id), m) in puts.into_iter().zip(&ids).zip(made.iter_mut()) {
                m.id = *id;
                ops.push(match op {
                    Op::Put { mut record, expect } => {
                        record.id = *id;
                        Op::Put { record, expect }
                    }
                    other => other,
                });
            }
            let (record, data) = {
                let state = self.state.lock();
                let mut data = state.data.clone();
                data.made.extend(&ids);
                let mut record = state.record.clone();
                record.data = encode(&data)?;
                record.updated_at = crate::store::now().max(record.created_at);
                (record, data)
            };
            let expect = Expect::Version(record.version);
            ops.push(Op::Put { record: record.clone(), expect });
            let t = self.tenant;
            match app.store.commit(t.0, ops).await {
                Ok(()) => {
                    let items: Vec<_> = made.iter().map(history_item).collect();
                    app.history.appended(t, self.session, &items);
                    let mut state = self.state.lock();
                    state.record = Record { version: record.version + 1, ..record };
                    state.data = data;
                    state.committed.extend(made);
                    let id = state.record.id;
                    drop(state);
                    app.background.changed(id);
                    Ok(())
                }
                Err(e) => {
                    app.history.forget(t, self.session);
                    Err(if run_lost(&e) { lost() } else { e.into() })
                }
            }
        })
    }
}

impl App {
    /// Starts running background responses: those under way at the last
    /// stop go on; on a shared store, also those another server leaves (its
    /// lease expired), looked for every third of `executions.lease_s`.
    pub async fn start_background_runs(
        &self,
        tools: &ToolsConfig,
        executions: &ExecutionsConfig,
        log: slog::Logger,
    ) -> Result<()> {
        let leases = self.store.shared().then(|| Arc::new(Leases::new(executions.lease_s)));
        let started = Started {
            slots: Arc::new(Semaphore::new(tools.background_runs.max(1))),
            leases: leases.clone(),
            max_begins: executions.max_step_attempts.max(1),
            max_per_tenant: tools.background_max_per_tenant.max(1),
            log: log.clone(),
        };
        if self.background.started.set(started).is_err() {
            return Ok(());
        }
        if let Some(mut changes) = self.store.changes() {
            let runs = Arc::downgrade(&self.background);
            let task = tokio::spawn(async move {
                loop {
                    let heard = match changes.recv().await {
                        Ok(Change::Record { kind: Kind::Run, id, .. }) => Some(id),
                        Ok(Change::Unknown) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            Some(Uuid::nil())
                        }
                        Ok(_) => None,
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    match (runs.upgrade(), heard) {
                        (Some(runs), Some(id)) => runs.changed(id),
                        (Some(_), None) => {}
                        (None, _) => return,
                    }
                }
            });
            self.background.tasks.lock().push(task.abort_handle());
        }
        match leases {
            Some(leases) => {
                let app = self.clone();
                let task = tokio::spawn(async move {
                    loop {
                        match app.store.scan_kind(Kind::Run).await {
                            Ok(runs) => {
                                for (tenant, rec) in runs {
                                    app.background_enqueue(Tenant(tenant), rec.id);
                                }
                            }
                            Err(e) => {
                                if let Some(s) = app.background.started.get() {
                                    slog::warn!(s.log, "background responses: cannot look for runs to take over";
                                        "error" => %e);
                                }
                            }
                        }
                        tokio::time::sleep(leases.period()).await;
                    }
                });
                self.background.tasks.lock().push(task.abort_handle());
            }
            None => {
                let runs = self.store.scan_kind(Kind::Run).await?;
                if !runs.is_empty() {
                    slog::info!(log, "resuming background responses that were under way at the last stop";
                        "count" => runs.len());
                }
                for (tenant, rec) in runs {
                    self.background_enqueue(Tenant(tenant), rec.id);
                }
            }
        }
        Ok(())
    }

    /// Runs the background response `id` on this server, unless it runs here already.
    fn background_enqueue(&self, t: Tenant, id: Uuid) {
        let runs = &self.background;
        let Some(started) = runs.started.get() else { return };
        if runs.stopping.load(Ordering::SeqCst) {
            return;
        }
        let mut active = runs.active.lock();
        if active.contains_key(&id) {
            return;
        }
        let app = self.clone();
        let slots = started.slots.clone();
        let task = tokio::spawn(async move {
            let Ok(_slot) = slots.acquire_owned().await else { return };
            app.background_claimed(t, id).await;
            app.background.active.lock().remove(&id);
            app.background.changed(id);
        });
        active.insert(id, task.abort_handle());
    }

    /// Runs `id` while this server may: on a shared store, while it holds its lease.
    async fn background_claimed(&self, t: Tenant, id: Uuid) {
        let Some(started) = self.background.started.get() else { return };
        let Some(leases) = &started.leases else {
            return self.background_retried(t, id).await;
        };
        let scope = match self.store.get(t.0, Kind::Run, id).await {
            Ok(Some(rec)) => rec.scope,
            Ok(None) => return,
            Err(e) => {
                slog::warn!(started.log, "background response: cannot read its run"; "id" => response_id(id), "error" => %e);
                return;
            }
        };
        match leases.claim_of(&*self.store, t, Kind::RunLease, (id, scope)).await {
            Ok(Claim::Held(held)) => {
                if let Some(previous) = &held.took_over {
                    slog::info!(started.log, "background response: taking over from a server that stopped";
                        "id" => response_id(id), "server" => %previous.holder);
                }
                tokio::select! {
                    () = self.background_retried(t, id) => {}
                    lost = leases.keep(&*self.store, &held) => {
                        slog::warn!(started.log, "background response: lost its lease, stopping here";
                            "id" => response_id(id), "why" => ?lost);
                    }
                }
                if let Err(e) = leases.release(&*self.store, &held).await {
                    slog::warn!(started.log, "background response: its lease was not released (it expires)";
                        "id" => response_id(id), "error" => %e);
                }
            }
            Ok(Claim::Busy { .. } | Claim::Nothing) => {}
            Err(e) => {
                slog::warn!(started.log, "background response: cannot claim it"; "id" => response_id(id), "error" => %e);
            }
        }
    }

    /// Runs `id`, beginning it again while the store cannot be reached (each
    /// begin counts: see [`RunData::begun`]).
    async fn background_retried(&self, t: Tenant, id: Uuid) {
        let Some(started) = self.background.started.get() else { return };
        loop {
            match Box::pin(self.background_run(t, id)).await {
                Ok(()) => return,
                Err(e @ (Error::StoreUnavailable(_) | Error::InsufficientStorage(_))) => {
                    slog::warn!(started.log, "background response: the store failed, beginning again soon";
                        "id" => response_id(id), "error" => %e);
                    tokio::time::sleep(STORE_RETRY).await;
                }
                Err(e) => {
                    slog::error!(started.log, "background response: cannot run it"; "id" => response_id(id), "error" => %e);
                    return;
                }
            }
        }
    }

    /// A background response under way: its `Run` record and what it keeps,
    /// and its `response` record and what that keeps. `None` when it has
    /// ended, or its response is gone (then its `Run` is deleted: nothing to run).
    async fn under_way(
        &self,
        t: Tenant,
        id: Uuid,
    ) -> Result<Option<(Record, RunData, Record, ResponseData)>> {
        let Some(rec) = self.store.get(t.0, Kind::Run, id).await? else { return Ok(None) };
        let run: RunData = serde_json::from_value(rec.data.clone()).map_err(|e| unreadable("run", id, e))?;
        let Some(resp) = self.store.get(t.0, Kind::Response, id).await? else {
            let delete = Op::Delete { kind: Kind::Run, id, version: Some(rec.version) };
            return match self.store.commit(t.0, vec![delete]).await {
                Ok(()) => Ok(None),
                Err(e) if run_lost(&e) => Ok(None),
                Err(e) => Err(e.into()),
            };
        };
        let data: ResponseData =
            serde_json::from_value(resp.data.clone()).map_err(|e| unreadable("response", id, e))?;
        Ok(Some((rec, run, resp, data)))
    }

    /// One begin of a background response, to its end (see the module's docs).
    async fn background_run(&self, t: Tenant, id: Uuid) -> Result<()> {
        let Some((rec, mut run, resp, mut data)) = self.under_way(t, id).await? else { return Ok(()) };
        let max = self.background.started.get().map_or(3, |s| s.max_begins);
        if run.begun >= max {
            let message = format!(
                "the server stopped {} times while this response ran (executions.max_step_attempts = {max}): \
                 it is not begun again",
                run.begun
            );
            let error = ResponseError { code: "server_error".into(), message };
            return self.background_end(t, id, Status::Failed, Some(error), Some(rec.version)).await;
        }
        run.begun += 1;
        data.status = Status::InProgress.stored();
        let mut run_rec = rec.clone();
        run_rec.data = encode(&run)?;
        let mut resp_rec = resp.clone();
        resp_rec.data = encode(&data)?;
        let begin = vec![
            Op::Put { record: run_rec.clone(), expect: Expect::Version(rec.version) },
            Op::Put { record: resp_rec, expect: Expect::Version(resp.version) },
        ];
        match self.store.commit(t.0, begin).await {
            Ok(()) => {}
            Err(e) if run_lost(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        self.background.changed(id);
        let mut committed = Vec::with_capacity(run.made.len());
        for m in &run.made {
            if let Some(m) = self.store.get(t.0, Kind::Message, *m).await? {
                committed.push(decode::<Message>(&m)?);
            }
        }
        let checkpoint = Arc::new(RunCheckpoint {
            tenant: t,
            session: run.session,
            response_version: resp.version + 1,
            input_messages: data.input_messages.clone(),
            state: parking_lot::Mutex::new(CheckState {
                record: Record { version: rec.version + 1, ..run_rec },
                data: run,
                committed,
            }),
        });
        match self.background_turn(t, &checkpoint, &resp).await {
            Ok(()) => Ok(()),
            Err(e @ (Error::StoreUnavailable(_) | Error::InsufficientStorage(_))) => Err(e),
            Err(e) => {
                let code = match &e {
                    Error::Upstream(_) | Error::UpstreamTimeout(_) | Error::RateLimited { .. } => {
                        "upstream_error"
                    }
                    Error::NoModelProvider(_) => "no_model_provider",
                    Error::NotFound(_)
                    | Error::BadRequest(_)
                    | Error::Invalid { .. }
                    | Error::Validation(_) => "invalid_request_error",
                    _ => "server_error",
                };
                let error = ResponseError { code: code.into(), message: e.to_string() };
                self.background_end(t, id, Status::Failed, Some(error), Some(checkpoint.version())).await
            }
        }
    }

    /// The turn of a background response begun, from where its history stands.
    async fn background_turn(&self, t: Tenant, checkpoint: &Arc<RunCheckpoint>, resp: &Record) -> Result<()> {
        let (request, conversation, previous, listed) = {
            let state = checkpoint.state.lock();
            let d = &state.data;
            (d.request.clone(), d.conversation, d.previous_response_id.clone(), d.listed_tools.clone())
        };
        let mut req: CreateResponseRequest =
            serde_json::from_value(request).map_err(|e| unreadable("request", resp.id, e))?;
        req.conversation = Some(ConversationRef::Id(ConvId(checkpoint.session)));
        let mut turn = self.response_turn(t, req, None, true).await?;
        turn.head.id = resp.id;
        turn.head.created_at = resp.created_at;
        turn.head.conversation = conversation;
        turn.head.previous_response_id = previous;
        turn.head.metadata = crate::api::types::Metadata(resp.metadata.clone().unwrap_or_default());
        let first = listed.is_none();
        match listed {
            Some(listed) => turn.listed_tools = listed,
            None => checkpoint.state.lock().data.listed_tools = Some(turn.listed_tools.clone()),
        }
        // The calls in flight when a server stopped, decided (run again, or
        // answered as interrupted), are committed before the model is asked.
        let decided: Vec<(Uuid, CreateMessageRequest)> = turn
            .saving
            .ids
            .take()
            .unwrap_or_default()
            .into_iter()
            .zip(std::mem::take(&mut turn.saving.new_messages))
            .collect();
        turn.saving.ids = Some(Vec::new());
        turn.decided = 0;
        if first || !decided.is_empty() {
            checkpoint.commit(self, decided).await?;
        }
        turn.rounds.checkpoint = Some(checkpoint.clone());
        turn.background = Some(checkpoint.clone());
        loop {
            let answer = turn.plan.provider.chat(&turn.plan.request).await?;
            let answered = Driver::whole(answer).collect(&turn.plan.request).await?;
            match turn.rounds.after(self, t, &answered, &mut turn.plan.request).await? {
                After::Again => continue,
                After::End(ending) => {
                    self.response_save(&mut turn, answered, ending).await?;
                    self.background.changed(resp.id);
                    return Ok(());
                }
            }
        }
    }

    /// Ends a background response `status` (failed, cancelled) unless it has
    /// ended, or (`expect`: the `Run` version its run last wrote) another run
    /// of it went on: its calls of the server's tools left in flight are
    /// answered, and its `Run` deleted.
    async fn background_end(
        &self,
        t: Tenant,
        id: Uuid,
        status: Status,
        error: Option<ResponseError>,
        expect: Option<u64>,
    ) -> Result<()> {
        for _ in 0..3 {
            let Some((rec, run, resp, mut data)) = self.under_way(t, id).await? else { return Ok(()) };
            if expect.is_some_and(|v| v != rec.version) {
                return Ok(());
            }
            let why = match status {
                Status::Cancelled => "not run: the response was cancelled",
                _ => "not run: the response failed",
            };
            let session = run.session;
            let answers = self.in_flight_answers(t, session, why).await?;
            let (made, puts) = message_records(session, answers).await?;
            data.status = status.stored();
            data.error = error.clone();
            data.output_messages = run.made.iter().copied().chain(made.iter().map(|m| m.id)).collect();
            data.output_message = data.output_messages.last().copied().unwrap_or(Uuid::nil());
            data.listed_tools = run.listed_tools.clone().unwrap_or_default();
            let mut resp_rec = resp.clone();
            resp_rec.data = encode(&data)?;
            resp_rec.updated_at = crate::store::now().max(resp_rec.created_at);
            let mut ops = Vec::new();
            if !made.is_empty() {
                ops.push(self.session_changes(session));
                ops.extend(puts);
            }
            ops.push(Op::Put { record: resp_rec, expect: Expect::Version(resp.version) });
            ops.push(Op::Delete { kind: Kind::Run, id, version: Some(rec.version) });
            match self.store.commit(t.0, ops).await {
                Ok(()) => {
                    let items: Vec<_> = made.iter().map(history_item).collect();
                    self.history.appended(t, session, &items);
                    self.background.changed(id);
                    return Ok(());
                }
                Err(e) if run_lost(&e) => {
                    // A run committed meanwhile (or ended it): look again.
                    self.history.forget(t, session);
                    continue;
                }
                Err(e) => {
                    self.history.forget(t, session);
                    return Err(e.into());
                }
            }
        }
        Err(Error::Conflict(format!(
            "response {} changed while it was being ended: try again",
            response_id(id)
        )))
    }

    /// The `tool` messages that answer, with `why`, the calls of the
    /// server's tools that the session's last calling message left
    /// unanswered (those waiting for approval wait on).
    async fn in_flight_answers(
        &self,
        t: Tenant,
        session: Uuid,
        why: &str,
    ) -> Result<Vec<CreateMessageRequest>> {
        let version = match self.store.get(t.0, Kind::Session, session).await? {
            Some(rec) => self.store.shared().then_some(rec.version),
            None => return Ok(Vec::new()),
        };
        let history = self.history(t, session, version).await?;
        let Some(at) =
            history.iter().rposition(|h| h.message.tool_calls.as_ref().is_some_and(|c| !c.is_empty()))
        else {
            return Ok(Vec::new());
        };
        let answered: HashSet<&str> =
            history[at + 1..].iter().filter_map(|h| h.message.tool_call_id.as_deref()).collect();
        let Some(rec) = self.store.get(t.0, Kind::Message, history[at].at.1).await? else {
            return Ok(Vec::new());
        };
        let message: Message = decode(&rec)?;
        let meta = message.metadata.map(|m| m.0).unwrap_or_default();
        let server_calls = meta.get("server_calls").and_then(Value::as_object).cloned().unwrap_or_default();
        let awaiting: HashSet<&str> = meta
            .get("awaiting_approval")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let servers = meta.get("mcp_servers").and_then(Value::as_object);
        let mut answers = Vec::new();
        for call in message.tool_calls.iter().flatten() {
            let id = call.id.as_str();
            let Some(kind) = server_calls.get(id) else { continue };
            if answered.contains(id) || awaiting.contains(id) {
                continue;
            }
            let run = ToolRun {
                id: call.id.clone(),
                kind: serde_json::from_value::<ToolRunType>(kind.clone()).unwrap_or(ToolRunType::ApiCall),
                name: call.function.name.clone(),
                server: servers.and_then(|s| s.get(id)).and_then(Value::as_str).map(String::from),
                arguments: call.function.arguments.clone(),
                output: None,
                error: Some(why.to_owned()),
                started_at: chrono::Utc::now(),
                ms: 0,
            };
            answers.push(tool_message(&run, told(&run)));
        }
        Ok(answers)
    }

    /// `POST /v1/responses` with `background: true` (see the module's docs).
    pub async fn response_background(&self, t: Tenant, req: CreateResponseRequest) -> Result<ModelResponse> {
        let max = self.background.started.get().map_or(1000, |s| s.max_per_tenant).max(1);
        let under_way =
            self.store.list(t.0, Kind::Run, Uuid::nil(), &ListQuery::oldest_first(max - 1, 1)).await?;
        if !under_way.is_empty() {
            return Err(Error::RateLimited {
                message: format!(
                    "this tenant has {max} background responses under way (queued or in progress): the limit of \
                     tools.background_max_per_tenant; wait for some to end, or cancel some"
                ),
                retry_after: None,
            });
        }
        let mut stored = req.clone();
        stored.input = None;
        stored.background = None;
        stored.stream = false;
        stored.previous_response_id = None;
        stored.conversation = None;
        let mut request = encode(&stored)?;
        // A response never shows its `mcp` tools' headers; its run needs them.
        for (i, tool) in req.tools.iter().flatten().enumerate() {
            if let Some(headers) = &tool.headers {
                request["tools"][i]["headers"] = json!(headers);
            }
        }
        let mut foreground = req;
        foreground.background = None;
        foreground.stream = false;
        let turn = self.response_turn(t, foreground, None, false).await?;
        let mut head = turn.head.clone();
        head.background = true;
        let queued = model_response(&head, Status::Queued, Vec::new(), None);
        let run = RunData {
            session: turn.saving.session,
            request,
            conversation: head.conversation,
            previous_response_id: head.previous_response_id.clone(),
            ..RunData::default()
        };
        let decided = turn.decided;
        let answer = self
            .save_turn(&turn.saving, Vec::new(), |made| {
                let (decided, inputs) = made.split_at(decided);
                let mut run = run;
                run.made = decided.iter().map(|m| m.id).collect();
                let usage = crate::api::types::ChatUsage::default();
                let mut data = super::response_data(
                    &head,
                    Status::Queued,
                    &usage,
                    inputs.iter().map(|m| m.id).collect(),
                    (Uuid::nil(), Vec::new()),
                    Vec::new(),
                );
                data.background = true;
                let mut record = Record::fresh(Kind::Response, turn.saving.session, encode(&data)?);
                record.id = head.id;
                (record.created_at, record.updated_at) = (head.created_at, head.created_at);
                record.metadata = Some(head.metadata.0.clone());
                let run_rec = Record::new(Kind::Run, head.id, Uuid::nil(), encode(&run)?);
                Ok((
                    vec![
                        Op::Put { record, expect: Expect::Absent },
                        Op::Put { record: run_rec, expect: Expect::Absent },
                    ],
                    Some(queued),
                ))
            })
            .await?;
        drop(turn);
        self.background_enqueue(t, head.id);
        Ok(answer.expect("the response is made"))
    }

    /// `POST /v1/responses/{id}/cancel` (see the operation's description).
    pub async fn response_cancel(&self, t: Tenant, id: &str) -> Result<ModelResponse> {
        let rec = self.response_record(t, id).await?;
        let data: ResponseData =
            serde_json::from_value(rec.data.clone()).map_err(|e| unreadable("response", rec.id, e))?;
        if !data.background {
            return Err(Error::Invalid {
                param: "response_id".into(),
                message: format!(
                    "{id} was not created with `background: true`: only background responses can be cancelled"
                ),
            });
        }
        self.background_cancel(t, rec.id).await?;
        self.response_get(t, id).await
    }

    /// Cancels a background response (one that ended stays as it is).
    async fn background_cancel(&self, t: Tenant, id: Uuid) -> Result<()> {
        self.background.abort(id);
        self.background_end(t, id, Status::Cancelled, None, None).await
    }

    /// A background response under way: its `mcp_list_tools` items and the
    /// messages its run committed so far.
    pub(super) async fn background_output(
        &self,
        t: Tenant,
        id: Uuid,
    ) -> Result<(Vec<ConversationItem>, Vec<Uuid>)> {
        match self.store.get(t.0, Kind::Run, id).await? {
            Some(rec) => {
                let run: RunData = serde_json::from_value(rec.data).map_err(|e| unreadable("run", id, e))?;
                Ok((run.listed_tools.unwrap_or_default(), run.made))
            }
            // It ended since its response was read: the next read shows the end.
            None => Ok((Vec::new(), Vec::new())),
        }
    }

    /// The events of a stored response as it stands, after `starting_after`,
    /// following a background response under way to its end (see
    /// `openai_response_get`).
    pub async fn response_follow(
        &self,
        t: Tenant,
        id: &str,
        starting_after: Option<i64>,
    ) -> Result<ResponseEvents> {
        let rec = self.response_record(t, id).await?;
        // Listening before the first look: no change falls between.
        let rx = self.background.changed.subscribe();
        let (events, ended) = self.follow_events(t, &rec).await?;
        let sent = starting_after.unwrap_or(-1);
        let mut follow = Follow { app: self.clone(), t, id: rec.id, sent, queue: VecDeque::new(), ended, rx };
        follow.take(events);
        Ok(Box::pin(futures::stream::unfold(follow, |mut f| async move {
            loop {
                if let Some(e) = f.queue.pop_front() {
                    return Some((Ok::<_, StreamFailure>(e), f));
                }
                if f.ended {
                    return None;
                }
                // Woken by a change of this response (or of any, when changes
                // were missed), or a poll's worth of time; with no one left to
                // tell (the application stopped), every poll.
                let deadline = tokio::time::Instant::now() + FOLLOW_POLL;
                loop {
                    match tokio::time::timeout_at(deadline, f.rx.recv()).await {
                        Ok(Ok(id)) if id != f.id && !id.is_nil() => continue,
                        Ok(Err(broadcast::error::RecvError::Closed)) => {
                            tokio::time::sleep_until(deadline).await
                        }
                        Ok(_) | Err(_) => {}
                    }
                    break;
                }
                let rec = match f.app.store.get(f.t.0, Kind::Response, f.id).await {
                    Ok(Some(rec)) => rec,
                    // Deleted, or the store is gone: the stream ends.
                    Ok(None) | Err(_) => return None,
                };
                match f.app.follow_events(f.t, &rec).await {
                    Ok((events, ended)) => {
                        f.ended = ended;
                        f.take(events);
                    }
                    Err(_) => return None,
                }
            }
        })))
    }

    /// The events of a response record as it stands, and whether it ended.
    async fn follow_events(&self, t: Tenant, rec: &Record) -> Result<(Vec<ResponseStreamEvent>, bool)> {
        let now = self.response_of(t, rec).await?;
        let ended = !matches!(now.status.as_str(), "queued" | "in_progress");
        let mut head = now.clone();
        head.status = if now.background { "queued".into() } else { "in_progress".into() };
        head.output = Vec::new();
        head.usage = None;
        head.completed_at = None;
        head.error = None;
        head.incomplete_details = None;
        let mut events = Events::replay(&head, &now, ended);
        if let Some(response) = events.get_mut(1).and_then(|e| e.response.as_mut()) {
            response.status = "in_progress".into();
        }
        Ok((events, ended))
    }
}

/// A follower of a response's events.
struct Follow {
    app: App,
    t: Tenant,
    id: Uuid,
    /// The last sequence number sent (or skipped: `starting_after`).
    sent: i64,
    queue: VecDeque<ResponseStreamEvent>,
    ended: bool,
    rx: broadcast::Receiver<Uuid>,
}

impl Follow {
    /// Queues the events after the last one sent.
    fn take(&mut self, events: Vec<ResponseStreamEvent>) {
        for e in events {
            let seq = e.sequence_number as i64;
            if seq > self.sent {
                self.sent = seq;
                self.queue.push_back(e);
            }
        }
    }
}

impl App {
    /// `POST /api/sessions/{id}/runs`: a chat turn run in the background, as
    /// a background response on the session with its agent as the model.
    pub async fn session_run_create(
        &self,
        t: Tenant,
        session: Uuid,
        req: SessionRunRequest,
    ) -> Result<SessionRun> {
        let rec = self.load(t, Kind::Session, session).await?;
        let s: Session = decode(&rec)?;
        let agent = match req.agent {
            Some(agent) if s.agents.contains(&agent) => agent,
            Some(agent) => {
                return Err(Error::Invalid {
                    param: "agent".into(),
                    message: format!("{agent} is not an agent of session {session}"),
                });
            }
            None => *s.agents.first().ok_or_else(|| {
                Error::BadRequest(format!(
                    "session {session} has no agent: a run needs one to answer (add one to the session)"
                ))
            })?,
        };
        let mut items = Vec::new();
        for (i, m) in req.messages.iter().enumerate() {
            if m.parts.is_some() {
                return Err(Error::Invalid {
                    param: format!("messages[{i}].parts"),
                    message: "a run's messages are text (send images and files through POST /v1/responses)"
                        .into(),
                });
            }
            items.push(match m.role {
                Role::Tool => {
                    json!({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content})
                }
                Role::User | Role::System => json!({"type": "message", "role": m.role, "content": m.content}),
                other => {
                    return Err(Error::Invalid {
                        param: format!("messages[{i}].role"),
                        message: format!(
                            "{other:?} messages are not a run's: send user, system or tool messages"
                        ),
                    });
                }
            });
        }
        for d in req.approvals.iter().flatten() {
            items.push(json!({"type": "mcp_approval_response", "approval_request_id": d.id,
                              "approve": d.approve, "reason": d.reason}));
        }
        let mut body = json!({"model": agent.to_string(), "background": true});
        if !items.is_empty() {
            body["input"] = Value::Array(items);
        }
        let mut request: CreateResponseRequest = serde_json::from_value(body)
            .map_err(|e| Error::BadRequest(format!("the run's messages do not make a turn: {e}")))?;
        request.conversation = Some(ConversationRef::Id(ConvId(session)));
        let created = self.response_background(t, request).await.map_err(|e| match e {
            // The turn's errors name its input: here, the run's messages and approvals.
            Error::Invalid { param, message } => {
                Error::Invalid { param: param.replacen("input[", "messages[", 1), message }
            }
            Error::BadRequest(message) => {
                Error::BadRequest(message.replace("input (mcp_approval_response)", "approvals"))
            }
            e => e,
        })?;
        self.session_run_get(t, session, &created.id).await
    }

    /// `GET /api/sessions/{id}/runs/{run_id}`.
    pub async fn session_run_get(&self, t: Tenant, session: Uuid, run_id: &str) -> Result<SessionRun> {
        let rec = self.response_record(t, run_id).await?;
        let data: ResponseData =
            serde_json::from_value(rec.data.clone()).map_err(|e| unreadable("response", rec.id, e))?;
        if rec.scope != session || !data.background {
            return Err(Error::NotFound(NotFound::Response { id: run_id.to_owned() }));
        }
        let response = self.response_of(t, &rec).await?;
        let ids = match matches!(response.status.as_str(), "queued" | "in_progress") {
            true => self.background_output(t, rec.id).await?.1,
            false => data.output_messages.clone(),
        };
        let mut messages = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(m) = self.store.get(t.0, Kind::Message, id).await? {
                messages.push(decode::<Message>(&m)?);
            }
        }
        let pending_approvals = match messages.last() {
            Some(last) if !matches!(response.status.as_str(), "queued" | "in_progress") => waiting(last),
            _ => Vec::new(),
        };
        Ok(SessionRun {
            id: response.id,
            session_id: session,
            status: response.status,
            created_at: rec.created_at,
            messages,
            pending_approvals,
            error: response.error,
        })
    }

    /// `POST /api/sessions/{id}/runs/{run_id}/cancel`.
    pub async fn session_run_cancel(&self, t: Tenant, session: Uuid, run_id: &str) -> Result<SessionRun> {
        // A background response of this session (else a 404), cancelled as on `/v1`.
        self.session_run_get(t, session, run_id).await?;
        let id = super::parse_response_id(run_id).expect("a run that was found has a response id");
        self.background_cancel(t, id).await?;
        self.session_run_get(t, session, run_id).await
    }
}

/// The calls of `last` (the run's last message) that wait for approval.
fn waiting(last: &Message) -> Vec<PendingApproval> {
    let meta = last.metadata.as_ref().map(|m| &m.0);
    let awaiting: HashSet<&str> = meta
        .and_then(|m| m.get("awaiting_approval"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let servers = meta.and_then(|m| m.get("mcp_servers")).and_then(Value::as_object);
    last.tool_calls
        .iter()
        .flatten()
        .filter(|c| awaiting.contains(c.id.as_str()))
        .map(|c| PendingApproval {
            id: c.id.clone(),
            tool: c.function.name.clone(),
            arguments: c.function.arguments.clone(),
            server: servers.and_then(|s| s.get(&c.id)).and_then(Value::as_str).map(String::from),
        })
        .collect()
}
