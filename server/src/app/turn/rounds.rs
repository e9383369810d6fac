//! The agent loop: rounds of the model and the server-run tools it calls.
//!
//! After each answer of the model, [`Rounds::after`] decides: an answer
//! that calls none of the server's tools ends the turn as it is (text, or
//! calls of the client's `function` tools, returned to the client). Calls of
//! the server's tools run (all of a round at once: [`App::run_tools`]); the
//! assistant message and the tools' results join the conversation, and the
//! model is asked again — unless the answer also called client tools (the
//! turn ends, returning those), or a limit is reached (`tools.max_rounds`,
//! `tools.max_calls_per_turn`: the calls are answered "not run" and the turn
//! ends with `finish_reason` `max_tool_rounds` or `max_tool_calls`).
//!
//! A call of a tool that needs approval does not run: once the round's
//! other calls ran, the turn ends `approval_required`, the calls that wait
//! in [`Ending::pending`]. They wait in the session's history (an assistant
//! message's calls that no `tool` message answers yet: [`pending_calls`]),
//! so they survive a restart; the next turn carries the decisions
//! ([`App::decide_pending`]): approved calls run, denied ones are told to
//! the model as denied, and the loop goes on.
//!
//! A background turn (a response with `background: true`) commits as it
//! goes, through its [`Checkpoint`]: each assistant message that calls the
//! server's tools before they run, their results once they ran. A server
//! that stops mid-round thus leaves in the history exactly the calls that
//! were in flight (called, unanswered), which the turn that resumes decides
//! on (see `app::responses::background`).
//!
//! Otherwise everything the rounds made is saved with the turn, before the answer:
//! each assistant message that called the server's tools (the kind of each
//! such call in its metadata under `server_calls`, by call id), each result as
//! a `tool` message carrying its [`ToolRun`] in its metadata under `tool_run`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::super::history::History;
use super::super::{App, Error, Result, Tenant};
use super::Answered;
use super::convert::reply_message;
use super::tools::{Toolbox, not_run, recorded, told};
use crate::api::types::{
    ApprovalDecision, ChatUsage, CreateMessageRequest, Metadata, PendingApproval, Role, ToolRun,
};
use crate::models::wire;

/// The loop's state over a turn.
#[derive(Default)]
pub struct Rounds {
    pub toolbox: Toolbox,
    /// Rounds of server-run calls so far.
    pub rounds: u32,
    /// Server-run calls so far.
    pub calls: usize,
    /// Every server-run call, in order.
    pub runs: Vec<ToolRun>,
    /// The messages the rounds made, to save after the turn's new messages.
    pub made: Vec<CreateMessageRequest>,
    /// The tokens of the rounds before the last answer.
    pub usage: ChatUsage,
    /// When the turn's messages have ids chosen in advance (a response's,
    /// whose items name them as they stream): the id the answer under way
    /// is saved under. Each answer that calls the server's tools takes it
    /// (and its results fresh ones) into [`Rounds::made_ids`], and the next
    /// answer gets a fresh one.
    pub answer_id: Option<uuid::Uuid>,
    /// The ids of [`Rounds::made`], when chosen in advance.
    pub made_ids: Vec<uuid::Uuid>,
    /// The request's own bound on the server's calls (a response's
    /// `max_tool_calls`), under `tools.max_calls_per_turn`.
    pub max_calls: Option<usize>,
    /// Where a background turn commits its rounds as they go (then
    /// [`Rounds::made`] keeps nothing: each round is saved already).
    pub checkpoint: Option<Arc<dyn Checkpoint>>,
}

/// Commits a background turn's messages as its rounds make them.
pub trait Checkpoint: Send + Sync {
    /// Commits `messages`, each under its id, after those committed before:
    /// an error stops the turn (the store failed, or the run is no longer
    /// this server's to run: cancelled, or taken over).
    fn commit<'a>(
        &'a self,
        app: &'a App,
        messages: Vec<(uuid::Uuid, CreateMessageRequest)>,
    ) -> BoxFuture<'a, Result<()>>;
}

/// What comes after an answer.
pub enum After {
    /// The model is asked again (the request has the calls and their results).
    Again,
    /// The turn ends with this answer.
    End(Ending),
}

/// How a turn ends.
pub struct Ending {
    /// The answer's finish reason, when the loop decides it (a limit).
    pub finish_reason: Option<String>,
    /// The answer's message was saved among [`Rounds::made`] already.
    pub saved: bool,
    /// The calls the client is to run, when the answer also called the
    /// server's tools (those ran: the client sees only its own).
    pub client_calls: Option<Vec<wire::ToolCall>>,
    /// The calls that wait for approval (`finish_reason` `approval_required`).
    pub pending: Vec<PendingApproval>,
}

impl Ending {
    fn plain() -> Ending {
        Ending { finish_reason: None, saved: false, client_calls: None, pending: Vec::new() }
    }
}

impl Rounds {
    pub fn new(toolbox: Toolbox) -> Rounds {
        Rounds { toolbox, ..Rounds::default() }
    }

    /// The usage of every round, the last answer's included.
    pub fn total_usage(&self, last: &ChatUsage) -> ChatUsage {
        ChatUsage {
            prompt_tokens: self.usage.prompt_tokens + last.prompt_tokens,
            completion_tokens: self.usage.completion_tokens + last.completion_tokens,
            total_tokens: self.usage.total_tokens + last.total_tokens,
        }
    }

    /// The ids chosen in advance for [`Rounds::to_save`]'s messages.
    pub fn ids_to_save(&self, ending: &Ending) -> Vec<uuid::Uuid> {
        let mut ids = self.made_ids.clone();
        if !ending.saved {
            ids.extend(self.answer_id);
        }
        ids
    }

    /// The messages to save after the turn's new ones: the rounds', then
    /// the answer's (unless it is among them).
    pub fn to_save(&self, answered: &Answered, ending: &Ending) -> Vec<CreateMessageRequest> {
        let mut messages = self.made.clone();
        if !ending.saved {
            messages.extend(answered.answer.message().map(reply_message));
        }
        messages
    }

    /// After an answer: runs the server's calls it makes, if any (see the
    /// module's docs). `request` gets the answer and the results when the
    /// model is to be asked again. Fails only when a [`Checkpoint`] does.
    pub async fn after(
        &mut self,
        app: &App,
        t: Tenant,
        answered: &Answered,
        request: &mut wire::CompletionRequest,
    ) -> Result<After> {
        let Some(message) = answered.answer.message() else { return Ok(After::End(Ending::plain())) };
        let calls = message.tool_calls.as_deref().unwrap_or_default();
        let (server, client): (Vec<_>, Vec<_>) =
            calls.iter().cloned().partition(|c| self.toolbox.get(&c.function.name).is_some());
        if server.is_empty() {
            return Ok(After::End(Ending::plain()));
        }
        let (waiting, to_run): (Vec<_>, Vec<_>) =
            server.iter().cloned().partition(|c| self.toolbox.needs_approval(&c.function.name));
        let configured = app.tool_runner.max_calls;
        let limit = if self.rounds >= app.tool_runner.max_rounds {
            Some(("max_tool_rounds", format!("tools.max_rounds ({})", app.tool_runner.max_rounds)))
        } else if let Some(asked) =
            self.max_calls.filter(|m| *m < configured && self.calls + to_run.len() > *m)
        {
            Some(("max_tool_calls", format!("the request's max_tool_calls ({asked})")))
        } else if self.calls + to_run.len() > configured {
            Some(("max_tool_calls", format!("tools.max_calls_per_turn ({configured})")))
        } else {
            None
        };
        let waiting = if limit.is_some() { Vec::new() } else { waiting };
        self.usage = self.total_usage(&answered.usage);
        let mut calling = reply_message(message);
        let kinds: Map<String, Value> = server
            .iter()
            .map(|c| {
                (
                    c.id.clone(),
                    serde_json::to_value(self.toolbox.kind_of(&c.function.name)).unwrap_or_default(),
                )
            })
            .collect();
        let mut metadata = Map::from_iter([("server_calls".to_owned(), Value::Object(kinds))]);
        if !waiting.is_empty() {
            let ids = waiting.iter().map(|c| Value::String(c.id.clone())).collect();
            metadata.insert("awaiting_approval".to_owned(), Value::Array(ids));
        }
        let servers: Map<String, Value> = server
            .iter()
            .filter_map(|c| Some((c.id.clone(), Value::String(self.toolbox.server_of(&c.function.name)?))))
            .collect();
        if !servers.is_empty() {
            metadata.insert("mcp_servers".to_owned(), Value::Object(servers));
        }
        calling.metadata = Some(Metadata(metadata));
        let calling_id = self.answer_id.unwrap_or_else(uuid::Uuid::now_v7);
        // A background turn's calls are committed before they run.
        if let Some(checkpoint) = &self.checkpoint {
            checkpoint.commit(app, vec![(calling_id, calling.clone())]).await?;
        }
        // The calling message's id, when it is saved under it: what memory edits name.
        self.toolbox.calling = (self.answer_id.is_some() || self.checkpoint.is_some()).then_some(calling_id);
        // Past a limit nothing runs, not even after an approval: every call of
        // the server's is answered "not run", and the turn ends.
        let runs = match &limit {
            Some((_, which)) => {
                let why = format!("not run: the turn reached its limit, {which}");
                server.iter().map(|c| not_run(&self.toolbox, c, why.clone())).collect()
            }
            None => app.run_tools(t, &self.toolbox, &to_run).await,
        };
        request.messages.push(message.clone());
        let mut results = Vec::new();
        for run in &runs {
            let result = told(run);
            request.messages.push(wire::ChatMessage::tool_result(&run.id, result.clone()));
            results.push((uuid::Uuid::now_v7(), tool_message(run, result)));
        }
        if let Some(checkpoint) = &self.checkpoint {
            checkpoint.commit(app, results).await?;
        } else {
            self.made.push(calling);
            self.made.extend(results.iter().map(|(_, m)| m.clone()));
            if self.answer_id.is_some() {
                self.made_ids.push(calling_id);
                self.made_ids.extend(results.iter().map(|(id, _)| *id));
            }
        }
        if self.answer_id.is_some() {
            self.answer_id = Some(uuid::Uuid::now_v7());
        }
        self.runs.extend(runs);
        if let Some((reason, _)) = limit {
            let finish_reason = Some(reason.into());
            return Ok(After::End(Ending {
                finish_reason,
                saved: true,
                client_calls: None,
                pending: Vec::new(),
            }));
        }
        self.rounds += 1;
        self.calls += to_run.len();
        if !waiting.is_empty() {
            let pending = waiting
                .iter()
                .map(|c| PendingApproval {
                    id: c.id.clone(),
                    tool: c.function.name.clone(),
                    arguments: c.function.arguments.clone(),
                    server: self.toolbox.server_of(&c.function.name),
                })
                .collect();
            let client_calls = (!client.is_empty()).then_some(client);
            let finish_reason = Some("approval_required".to_owned());
            return Ok(After::End(Ending { finish_reason, saved: true, client_calls, pending }));
        }
        if !client.is_empty() {
            let client_calls = Some(client);
            return Ok(After::End(Ending {
                finish_reason: None,
                saved: true,
                client_calls,
                pending: Vec::new(),
            }));
        }
        Ok(After::Again)
    }
}

/// The calls of the server's tools that wait for a person's decision: the
/// calls of the history's last assistant message that calls tools which no
/// later `tool` message answers and which the server would run.
pub fn pending_calls(history: &History, toolbox: &Toolbox) -> Vec<wire::ToolCall> {
    let Some(at) = history.iter().rposition(|h| h.message.tool_calls.as_ref().is_some_and(|c| !c.is_empty()))
    else {
        return Vec::new();
    };
    let answered: std::collections::HashSet<&str> =
        history[at + 1..].iter().filter_map(|h| h.message.tool_call_id.as_deref()).collect();
    history[at]
        .message
        .tool_calls
        .iter()
        .flatten()
        .filter(|c| !answered.contains(c.id.as_str()) && toolbox.get(&c.function.name).is_some())
        .cloned()
        .collect()
}

impl App {
    /// The `tool` messages that answer the calls waiting for approval
    /// (`pending`) as `decisions` say: approved calls run. Every waiting call
    /// needs a decision and every decision a waiting call: else a 400 naming
    /// `field` (`approvals`).
    pub async fn decide_pending(
        &self,
        t: Tenant,
        rounds: &mut Rounds,
        pending: &[wire::ToolCall],
        decisions: &[ApprovalDecision],
        field: &str,
    ) -> Result<Vec<CreateMessageRequest>> {
        for (i, d) in decisions.iter().enumerate() {
            if !pending.iter().any(|c| c.id == d.id) {
                let waiting = if pending.is_empty() { "none".to_owned() } else { ids(pending) };
                return Err(Error::BadRequest(format!(
                    "{field}[{i}].id: no call {:?} waits for approval (waiting: {waiting})",
                    d.id
                )));
            }
            if decisions[..i].iter().any(|e| e.id == d.id) {
                return Err(Error::BadRequest(format!("{field}[{i}].id: call {:?} is decided twice", d.id)));
            }
        }
        let undecided: Vec<_> =
            pending.iter().filter(|c| !decisions.iter().any(|d| d.id == c.id)).cloned().collect();
        if !undecided.is_empty() {
            return Err(Error::BadRequest(format!(
                "{field}: calls wait for approval: decide on each of them ({}) with \
                 {{\"id\", \"approve\": true|false, \"reason\"?}}",
                ids(&undecided)
            )));
        }
        let decided: Vec<_> = pending
            .iter()
            .map(|c| {
                let d = decisions.iter().find(|d| d.id == c.id).expect("decided");
                (c.clone(), d.approve, d.reason.clone())
            })
            .collect();
        let runs = self.run_decided(t, &rounds.toolbox, &decided).await;
        let messages = runs.iter().map(|run| tool_message(run, told(run))).collect();
        rounds.runs.extend(runs);
        Ok(messages)
    }
}

impl App {
    /// The `tool` messages that answer the calls a background turn left in
    /// flight when its server stopped (`pending`): a call of an idempotent
    /// tool (that needs no approval) runs again; any other is answered
    /// "interrupted", never run twice.
    pub async fn resume_pending(
        &self,
        t: Tenant,
        rounds: &mut Rounds,
        pending: &[wire::ToolCall],
    ) -> Vec<CreateMessageRequest> {
        let toolbox = &rounds.toolbox;
        let calls: Vec<(&wire::ToolCall, Option<String>)> = pending
            .iter()
            .map(|c| {
                let again = toolbox.idempotent(&c.function.name) && !toolbox.needs_approval(&c.function.name);
                let interrupted = "interrupted: the server stopped while this call ran, and its tool is not \
                                   marked idempotent, so it was not run again";
                (c, (!again).then(|| interrupted.to_owned()))
            })
            .collect();
        let runs = self.run_unless(t, toolbox, &calls).await;
        let messages = runs.iter().map(|run| tool_message(run, told(run))).collect();
        rounds.runs.extend(runs);
        messages
    }
}

fn ids(calls: &[wire::ToolCall]) -> String {
    calls.iter().map(|c| format!("{:?} ({})", c.id, c.function.name)).collect::<Vec<_>>().join(", ")
}

/// The `tool` message of a run: what the model was told, and the run in its metadata.
pub fn tool_message(run: &ToolRun, content: String) -> CreateMessageRequest {
    let mut metadata = Map::new();
    metadata.insert("tool_run".into(), recorded(run));
    CreateMessageRequest {
        role: Role::Tool,
        content,
        name: None,
        tool_calls: None,
        tool_call_id: Some(run.id.clone()),
        metadata: Some(Metadata(metadata)),
        parts: None,
    }
}
