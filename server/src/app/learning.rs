//! Learning after a turn: an agent whose learning policy is enabled keeps
//! durable facts about its users in their memory blocks.
//!
//! A saved turn of a session of such an agent with users commits, with the
//! turn, a [`Kind::LearningJob`] record (the agent, the session, the users,
//! the turn's messages). A pool runs each job: it sends the turn and the
//! users' writable blocks to the model with the memory tools, and turns the
//! calls the model makes (at most `max_edits`, on the blocks the policy
//! allows) into one edit per block touched: applied at once, or proposed
//! (`approve` mode). The edits and the job's delete are one commit, which
//! expects the job's and the blocks' versions: a job is applied once, even
//! when two servers (or a server and its restart) run it.
//!
//! A job begins again after a restart (sled: at start; a shared store: any
//! server, once the job was left alone for `executions.lease_s`). Every
//! begin is counted in the job: one begun `executions.max_step_attempts`
//! times is dropped with a log line, as is one whose model fails that often
//! here; nothing waits without end.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use uuid::Uuid;

use super::memory::{BlockData, Provenance, StoredEditStatus, edit_record};
use super::memory_tools::MemoryEdit;
use super::records::{decode, decode_data, encode};
use super::{App, Error, Result, Tenant};
use crate::api::types::{Block, LearningMode, LearningPolicy, Message, Role, Session};
use crate::models::wire;
use crate::store::{Expect, Kind, Op, Record, StoreError, now};

/// The longest a job's model call may take.
const MODEL_TIMEOUT: Duration = Duration::from_secs(120);
/// The most characters of the turn's messages the model reads.
const MAX_TRANSCRIPT_CHARS: usize = 50_000;

/// The jobs this server runs.
#[derive(Default)]
pub struct Learning {
    started: std::sync::OnceLock<Started>,
    active: parking_lot::Mutex<HashMap<(Tenant, Uuid), tokio::task::JoinHandle<()>>>,
    stopping: AtomicBool,
}

struct Started {
    slots: Arc<Semaphore>,
    max_begins: u32,
    /// How long a job may be left alone before another server takes it (shared store).
    abandoned_after: chrono::Duration,
    log: slog::Logger,
}

/// A job's stored fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobData {
    pub agent: Uuid,
    pub session: Uuid,
    pub users: Vec<Uuid>,
    /// The turn's messages, in order.
    pub messages: Vec<Uuid>,
    /// How often a server began it.
    #[serde(default)]
    pub begun: u32,
}

/// What a turn needs to start learning: decided before it is saved.
#[derive(Clone, Debug)]
pub struct LearnAfter {
    agent: Uuid,
    session: Uuid,
    users: Vec<Uuid>,
}

impl LearnAfter {
    /// The ops that start learning from a turn whose messages are `messages`
    /// (none without `learn`), the job's id in `job`.
    pub fn ops(learn: Option<&LearnAfter>, messages: Vec<Uuid>, job: &mut Option<Uuid>) -> Result<Vec<Op>> {
        let Some(learn) = learn else { return Ok(Vec::new()) };
        let data = JobData {
            agent: learn.agent,
            session: learn.session,
            users: learn.users.clone(),
            messages,
            begun: 0,
        };
        let rec = Record::fresh(Kind::LearningJob, Uuid::nil(), encode(&data)?);
        *job = Some(rec.id);
        Ok(vec![Op::Put { record: rec, expect: Expect::Absent }])
    }
}

/// A learning policy's stored fields (the contract's [`LearningPolicy`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct PolicyData {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    blocks: Option<Vec<String>>,
    #[serde(default)]
    approve: bool,
    #[serde(default)]
    max_edits: Option<i64>,
}

impl From<&LearningPolicy> for PolicyData {
    fn from(p: &LearningPolicy) -> Self {
        PolicyData {
            enabled: p.enabled,
            model: p.model.clone(),
            blocks: p.blocks.clone(),
            approve: p.mode == LearningMode::Approve,
            max_edits: Some(p.max_edits),
        }
    }
}

/// The policy a record keeps (an unreadable one: the default, disabled).
fn stored_policy(rec: &Record) -> LearningPolicy {
    let d: PolicyData = serde_json::from_value(rec.data.clone()).unwrap_or_default();
    let default = LearningPolicy::default();
    LearningPolicy {
        enabled: d.enabled,
        model: d.model,
        blocks: d.blocks,
        mode: if d.approve { LearningMode::Approve } else { LearningMode::Apply },
        max_edits: d.max_edits.unwrap_or(default.max_edits),
    }
}

impl App {
    /// The agent's learning policy (the default, disabled, when none was set).
    pub async fn learning_get(&self, t: Tenant, agent: Uuid) -> Result<LearningPolicy> {
        self.load(t, Kind::Agent, agent).await?;
        Ok(match self.store.get(t.0, Kind::LearningPolicy, agent).await? {
            Some(rec) => stored_policy(&rec),
            None => LearningPolicy::default(),
        })
    }

    /// Sets the agent's learning policy.
    pub async fn learning_put(
        &self,
        t: Tenant,
        agent: Uuid,
        policy: LearningPolicy,
    ) -> Result<LearningPolicy> {
        let _queue = self.lock_record(t, Kind::LearningPolicy, agent).await;
        let current = self.store.get(t.0, Kind::LearningPolicy, agent).await?;
        let (mut rec, expect) = match current {
            Some(rec) => {
                let expect = Expect::Version(rec.version);
                (rec, expect)
            }
            None => (Record::new(Kind::LearningPolicy, agent, agent, Value::Null), Expect::Absent),
        };
        rec.data = encode(&PolicyData::from(&policy))?;
        rec.updated_at = now().max(rec.created_at);
        let ops = vec![Op::Put { record: rec, expect }, Op::Require { kind: Kind::Agent, id: agent }];
        match self.store.commit(t.0, ops).await {
            Ok(()) => Ok(policy),
            Err(StoreError::Stale | StoreError::IdTaken { .. }) => {
                Err(Error::Conflict("the learning policy changed meanwhile: send the request again".into()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a turn of `agent` in `session` learns: its policy is enabled
    /// and the session has users.
    pub(in crate::app) async fn learn_after(
        &self,
        t: Tenant,
        agent: Uuid,
        session: &Session,
    ) -> Result<Option<LearnAfter>> {
        if session.users.is_empty() {
            return Ok(None);
        }
        let Some(rec) = self.store.get(t.0, Kind::LearningPolicy, agent).await? else { return Ok(None) };
        Ok(stored_policy(&rec).enabled.then(|| LearnAfter {
            agent,
            session: session.id,
            users: session.users.clone(),
        }))
    }

    /// Starts running learning jobs: those left at the last stop, and on a
    /// shared store those other servers leave.
    pub async fn start_learning(
        &self,
        executions: &crate::config::ExecutionsConfig,
        tools: &crate::config::ToolsConfig,
        log: slog::Logger,
    ) -> Result<()> {
        let lease = Duration::from_secs(executions.lease_s.max(1));
        let started = Started {
            slots: Arc::new(Semaphore::new(tools.background_runs.max(1))),
            max_begins: executions.max_step_attempts.max(1),
            abandoned_after: chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(15)),
            log: log.clone(),
        };
        if self.learning.started.set(started).is_err() {
            return Ok(());
        }
        let jobs = self.store.scan_kind(Kind::LearningJob).await?;
        if !jobs.is_empty() {
            slog::info!(log, "learning jobs left at the last stop go on"; "count" => jobs.len());
        }
        for (tenant, rec) in jobs {
            self.learning_enqueue(Tenant(tenant), rec.id);
        }
        if self.store.shared() {
            let app = self.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(lease / 3).await;
                    if app.learning.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    let Some(started) = app.learning.started.get() else { return };
                    match app.store.scan_kind(Kind::LearningJob).await {
                        Ok(jobs) => {
                            for (tenant, rec) in jobs {
                                if rec.updated_at + started.abandoned_after < now() {
                                    app.learning_enqueue(Tenant(tenant), rec.id);
                                }
                            }
                        }
                        Err(e) => {
                            slog::warn!(started.log, "learning: cannot look for jobs left by other servers"; "error" => %e)
                        }
                    }
                }
            });
        }
        Ok(())
    }

    /// Stops learning (a shutdown): no job is taken, and those under way stop
    /// where they are (a job commits nothing until its end: the next start
    /// begins it again).
    /// Waits (at most 5 s) until the stopped jobs are gone, so that none
    /// holds the store any more.
    pub async fn stop_learning(&self) {
        self.learning.stopping.store(true, Ordering::SeqCst);
        let tasks: Vec<_> = self.learning.active.lock().drain().map(|(_, task)| task).collect();
        for task in &tasks {
            task.abort();
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(tasks)).await;
    }

    /// Runs job `id` here, unless it runs here already.
    pub fn learning_enqueue(&self, t: Tenant, id: Uuid) {
        let Some(started) = self.learning.started.get() else { return };
        let mut active = self.learning.active.lock();
        if self.learning.stopping.load(Ordering::SeqCst) || active.contains_key(&(t, id)) {
            return;
        }
        let app = self.clone();
        let slots = started.slots.clone();
        let task = tokio::spawn(async move {
            if let Ok(_slot) = slots.acquire_owned().await {
                app.learn(t, id).await;
            }
            app.learning.active.lock().remove(&(t, id));
        });
        active.insert((t, id), task);
    }

    /// Runs a job to its end: applied (or proposed), dropped, or left to
    /// another begin after a failure.
    async fn learn(&self, t: Tenant, id: Uuid) {
        let Some(started) = self.learning.started.get() else { return };
        let log = started.log.new(slog::o!("learning_job" => id.to_string()));
        let mut delay = Duration::from_millis(200);
        loop {
            match self.learn_once(t, id, started.max_begins).await {
                Ok(Some(done)) => {
                    slog::info!(log, "learning job ended"; "edits" => done);
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    slog::warn!(log, "learning job failed; it begins again"; "error" => %e);
                    if self.learning.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 4).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// One begin of a job: `Ok(Some(edits))` when it ended here, `Ok(None)`
    /// when there was nothing (more) to do here, `Err` to begin again.
    async fn learn_once(&self, t: Tenant, id: Uuid, max_begins: u32) -> Result<Option<usize>, String> {
        let store_err = |e: StoreError| e.to_string();
        let Some(mut rec) = self.store.get(t.0, Kind::LearningJob, id).await.map_err(store_err)? else {
            return Ok(None);
        };
        let mut job: JobData = serde_json::from_value(rec.data.clone()).map_err(|e| e.to_string())?;
        let drop_job = |version: u64, why: &str| {
            let why = why.to_owned();
            async move {
                let gone = vec![Op::Delete { kind: Kind::LearningJob, id, version: Some(version) }];
                match self.store.commit(t.0, gone).await {
                    Ok(()) => {
                        if let Some(s) = self.learning.started.get() {
                            slog::warn!(s.log, "learning job dropped"; "learning_job" => %id, "why" => why);
                        }
                        Ok(Some(0))
                    }
                    Err(StoreError::Stale | StoreError::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        if job.begun >= max_begins {
            return drop_job(
                rec.version,
                &format!("begun {} times (executions.max_step_attempts)", job.begun),
            )
            .await;
        }
        // Counted before anything else: a job that kills its server ends.
        job.begun += 1;
        let expect = Expect::Version(rec.version);
        rec.data = serde_json::to_value(&job).map_err(|e| e.to_string())?;
        rec.updated_at = now().max(rec.created_at);
        match self.store.commit(t.0, vec![Op::Put { record: rec.clone(), expect }]).await {
            Ok(()) => rec.version += 1,
            // Another server began it (or ended it).
            Err(StoreError::Stale | StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
        let policy = match self.store.get(t.0, Kind::LearningPolicy, job.agent).await.map_err(store_err)? {
            Some(p) => stored_policy(&p),
            None => return drop_job(rec.version, "the agent has no learning policy (any more)").await,
        };
        if !policy.enabled {
            return drop_job(rec.version, "the agent's learning is disabled").await;
        }
        let agent = match self.agent_get(t, job.agent).await {
            Ok(agent) => agent,
            Err(Error::NotFound(_)) => return drop_job(rec.version, "the agent is gone").await,
            Err(e) => return Err(e.to_string()),
        };
        // The users' blocks it may write.
        let allowed =
            |b: &Block| !b.read_only && policy.blocks.as_ref().is_none_or(|ls| ls.contains(&b.label));
        let mut blocks: Vec<Block> = Vec::new();
        for user in &job.users {
            let theirs = self.blocks_of(t, *user).await.map_err(|e| e.to_string())?;
            for b in theirs {
                if allowed(&b) && !blocks.iter().any(|o| o.label == b.label) {
                    blocks.push(b);
                }
            }
        }
        if blocks.is_empty() {
            return drop_job(rec.version, "no block of the session's users that the policy lets it write")
                .await;
        }
        let mut messages = Vec::new();
        for m in &job.messages {
            if let Some(r) = self.store.get(t.0, Kind::Message, *m).await.map_err(store_err)?
                && let Ok(message) = decode::<Message>(&r)
            {
                messages.push(message);
            }
        }
        let answer = messages.iter().rev().find(|m| m.role == Role::Assistant).map(|m| m.id);
        let (provider, model) =
            self.choose_model(policy.model.as_deref(), &agent).map_err(|e| e.to_string())?;
        let mut request = wire::CompletionRequest::new(
            model,
            vec![
                wire::ChatMessage::system(instructions(&blocks)),
                wire::ChatMessage::user(transcript(&messages)),
            ],
        );
        request.tools = Some(
            MemoryEdit::ALL
                .into_iter()
                .map(|e| wire::ToolSpec::function(e.name(), Some(e.description().to_owned()), e.parameters()))
                .collect(),
        );
        let answered = match tokio::time::timeout(MODEL_TIMEOUT, provider.chat(&request)).await {
            Ok(Ok(answered)) => answered,
            Ok(Err(e)) => return Err(format!("the model failed: {e}")),
            Err(_) => return Err(format!("the model took longer than {} s", MODEL_TIMEOUT.as_secs())),
        };

        // The calls, applied in order to the blocks as they are now: one edit per block.
        let mut touched: HashMap<Uuid, (Record, BlockData, String, Vec<MemoryEdit>)> = HashMap::new();
        for call in answered.tool_calls().iter().take(policy.max_edits.clamp(1, 20) as usize) {
            let Some(edit) = MemoryEdit::named(&call.function.name) else { continue };
            let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.function.arguments) else {
                continue;
            };
            let Some(label) = args.get("label").and_then(Value::as_str) else { continue };
            let Some(block) = blocks.iter().find(|b| b.label == label) else { continue };
            let entry = match touched.entry(block.id) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let Some(r) = self.store.get(t.0, Kind::Block, block.id).await.map_err(store_err)? else {
                        continue;
                    };
                    let data: BlockData = decode_data::<Block>(&r).map_err(|e| e.to_string())?;
                    let before = data.value.clone();
                    e.insert((r, data, before, Vec::new()))
                }
            };
            let (_, data, _, edits) = entry;
            if let Ok(value) = edit.apply(&data.value, label, &args as &Map<String, Value>)
                && value.chars().count() as i64 <= data.limit
            {
                data.value = value;
                edits.push(edit);
            }
        }
        let source = Provenance {
            agent_id: Some(job.agent),
            session_id: Some(job.session),
            message_id: answer,
            learning_job_id: Some(id),
            ..Provenance::default()
        };
        let mut ops = vec![Op::Delete { kind: Kind::LearningJob, id, version: Some(rec.version) }];
        let mut made = 0;
        for (block, (mut r, data, before, edits)) in touched {
            if data.value == before || edits.is_empty() {
                continue;
            }
            let op = if edits.len() == 1 { edits[0].op() } else { MemoryEdit::Rethink.op() };
            let proposed = policy.mode == LearningMode::Approve;
            let version = if proposed { r.version } else { r.version + 1 };
            let status = if proposed { StoredEditStatus::Proposed } else { StoredEditStatus::Applied };
            let edit = edit_record(block, op, before, data.value.clone(), version, source.clone(), status)
                .map_err(|e| e.to_string())?;
            ops.push(Op::Put { record: edit, expect: Expect::Absent });
            if proposed {
                ops.push(Op::Require { kind: Kind::Block, id: block });
            } else {
                let expect = Expect::Version(r.version);
                r.data = encode(&data).map_err(|e| e.to_string())?;
                r.updated_at = now().max(r.created_at);
                ops.push(Op::Put { record: r, expect });
            }
            made += 1;
        }
        match self.store.commit(t.0, ops).await {
            Ok(()) => Ok(Some(made)),
            // A block changed meanwhile (or another begin ended it): begin again.
            Err(StoreError::Stale) => Err("a block changed while the job ran".into()),
            Err(StoreError::NotFound { kind: Kind::LearningJob, .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What the model is asked to do, with the blocks it may write.
fn instructions(blocks: &[Block]) -> String {
    let mut text = String::from(
        "You keep what is worth remembering about the user in their memory blocks. Read the turn of \
         a conversation that follows. If it tells durable facts about the user (who they are, what \
         they prefer, their plans, anything that will matter in later conversations), record them \
         with memory_insert, memory_replace or memory_rethink on the blocks below. Do not record what \
         a block says already, small talk, or anything about the assistant. If there is nothing to \
         keep, answer \"nothing\".\n\nThe blocks:\n",
    );
    for b in blocks {
        text.push_str(&format!(
            "\n<{} chars=\"{}/{}\">\n{}{}\n</{}>\n",
            b.label,
            b.value.chars().count(),
            b.limit,
            if b.description.is_empty() { String::new() } else { format!("{}\n---\n", b.description) },
            b.value,
            b.label
        ));
    }
    text
}

/// The turn's messages as text, cut to [`MAX_TRANSCRIPT_CHARS`].
fn transcript(messages: &[Message]) -> String {
    let mut text = String::new();
    for m in messages.iter().filter(|m| !m.content.is_empty()) {
        let role =
            serde_json::to_value(m.role).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        text.push_str(&format!("{role}: {}\n", m.content));
    }
    if text.chars().count() > MAX_TRANSCRIPT_CHARS {
        text = text.chars().take(MAX_TRANSCRIPT_CHARS).collect();
    }
    text
}
