//! Session chat: one turn (see [`super::turn`]) in a session, answered whole
//! ([`App::chat`]) or chunk by chunk ([`App::chat_stream`]).
//!
//! The turn holds the session (its chat lock, and on a shared store its
//! lease: see [`super::chat_lock`]) from the plan to the save. The agent
//! answering is the request's `agent` (one of the session's) or the session's
//! first; the tools on offer are the session's, then the request's; recall
//! runs when the request asks (`recall`); the new messages are rendered as
//! templates when the session has `render_templates`. When `save`, the new
//! messages and the answer are appended in one commit.
//!
//! Streamed: the contract's chunks as the provider's arrive; once the
//! provider is done, the save, then a last chunk with `usage` and `docs`. A
//! failure ends the stream with one `Err` and saves nothing; so does a client
//! that goes away.

use std::collections::VecDeque;

use chrono::Utc;
use futures::future::BoxFuture;
use uuid::Uuid;

use super::learning::LearnAfter;

use super::turn::convert::{answer_id, contract_chunk, from_wire_call};
use super::turn::drive::{self, End, Items};
use super::turn::plan::{New, tool_specs, wire_tool_choice};
use super::turn::rounds::{After, Ending, Rounds, pending_calls};
use super::turn::{Answered, Ask, Driver, Plan, Saving, Shape, SystemFor};
use super::{App, Error, Result, Tenant};
use crate::api::types::Agent;
use crate::api::types::Role;
use crate::api::types::{
    ChatAnswerMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatRequest, ChatResponse,
};
use crate::models::wire;

/// The chunks of a streamed chat; it ends after the last chunk, or with one `Err`.
pub type ChatChunks = Items<Result<ChatChunk>>;

/// A session chat, planned: what to send, and where to save.
pub struct ChatTurn {
    plan: Plan,
    saving: Saving,
    /// The agent loop over the server-run tools (see [`super::turn::rounds`]).
    rounds: Rounds,
    /// Learning after the turn, when the agent's policy has it.
    learning: Option<LearnAfter>,
}

impl App {
    /// Holds the session and plans the turn.
    async fn chat_turn(&self, t: Tenant, session_id: Uuid, req: ChatRequest) -> Result<ChatTurn> {
        let held = self.hold_session(t, session_id).await?;
        let session = &held.session;
        let agent_id = match req.agent {
            Some(a) if !session.agents.contains(&a) => {
                return Err(Error::BadRequest(format!("agent {a} is not an agent of session {session_id}")));
            }
            Some(a) => a,
            None => *session.agents.first().ok_or_else(|| {
                Error::BadRequest(format!(
                    "session {session_id} has no agent to answer (a conversation made through \
                     POST /v1/conversations): chat in it with an agent's id as the model through /v1"
                ))
            })?,
        };
        let agent: Agent = self.agent_get(t, agent_id).await?;
        let users = self.session_users(t, session).await?;
        let stored = self.session_tools(t, session_id).await?;
        let mut tools = tool_specs(&stored, req.tools.as_deref());
        let (toolbox, listed) = self.session_toolbox(t, &stored, session).await;
        tools.extend(toolbox.specs().cloned());
        let history = self.history(t, session_id, held.version).await?;
        // The decisions on the calls the last answer left waiting come first.
        let mut rounds = Rounds::new(toolbox);
        let pending = pending_calls(&history, &rounds.toolbox);
        let decisions = req.approvals.as_deref().unwrap_or_default();
        let mut new = self.decide_pending(t, &mut rounds, &pending, decisions, "approvals").await?;
        new.extend(req.messages);
        let mut plan = self
            .plan(
                t,
                Ask {
                    agent: Some(&agent),
                    model: req.model.as_deref(),
                    settings: req.settings,
                    tools,
                    recall: req.recall.then_some(session.users.as_slice()),
                    system: Some(SystemFor { users: &users, session: Some(session) }),
                    instructions: listed.note(),
                    history: Some((&history, session)),
                    new: New::Saved(new),
                    render_templates: true,
                    tool_choice: req.tool_choice.map(wire_tool_choice),
                    response_format: req
                        .response_format
                        .map(|f| serde_json::to_value(f).unwrap_or(serde_json::Value::Null)),
                    stream: req.stream,
                },
            )
            .await?;
        // Ids chosen in advance: a memory edit names the message that called it.
        let ids = plan.new_messages.iter().map(|_| Uuid::now_v7()).collect();
        rounds.answer_id = Some(Uuid::now_v7());
        let saving = Saving {
            tenant: t,
            session: session_id,
            save: req.save,
            new_session: None,
            new_messages: std::mem::take(&mut plan.new_messages),
            ids: Some(ids),
            lease: held.lease,
            lock: Some(held.lock),
        };
        let learning = self.learn_after(t, agent.id, session).await?;
        Ok(ChatTurn { plan, saving, rounds, learning })
    }

    /// Saves a chat's turn (with `answer`, remembered for its
    /// `Idempotency-Key`), and the learning job after it when the agent learns.
    async fn save_chat_turn<A: serde::Serialize>(
        &self,
        turn: &ChatTurn,
        replies: Vec<crate::api::types::CreateMessageRequest>,
        answer: Option<&A>,
    ) -> Result<()> {
        let mut job = None;
        let learning = turn.learning.as_ref();
        self.save_turn(&turn.saving, replies, |made| {
            Ok((LearnAfter::ops(learning, made.iter().map(|m| m.id).collect(), &mut job)?, answer))
        })
        .await?;
        if let (Some(job), true) = (job, turn.saving.save) {
            self.learning_enqueue(turn.saving.tenant, job);
        }
        Ok(())
    }

    /// A chat answered whole: the model's answer (after the rounds of the
    /// server-run tools it calls), saved when `save`.
    pub async fn chat(&self, t: Tenant, session: Uuid, req: ChatRequest) -> Result<ChatResponse> {
        let mut turn = self.chat_turn(t, session, req).await?;
        loop {
            let answer = turn.plan.provider.chat(&turn.plan.request).await?;
            let answered = Driver::whole(answer).collect(&turn.plan.request).await?;
            let ending = match turn.rounds.after(self, t, &answered, &mut turn.plan.request).await? {
                After::Again => continue,
                After::End(ending) => ending,
            };
            let replies = turn.rounds.to_save(&answered, &ending);
            turn.saving.with_round_ids(&turn.rounds, &ending);
            let response = chat_response(&turn.plan, &mut turn.rounds, answered, ending);
            self.save_chat_turn(&turn, replies, Some(&response)).await?;
            return Ok(response);
        }
    }

    /// A chat answered chunk by chunk (see the module's docs). The provider's
    /// stream is opened first, so a provider that fails at once is an ordinary error.
    pub async fn chat_stream(&self, t: Tenant, session: Uuid, req: ChatRequest) -> Result<ChatChunks> {
        let turn = self.chat_turn(t, session, req).await?;
        let upstream = turn.plan.provider.chat_stream(&turn.plan.request).await?;
        let shape = ChatShape { app: self.clone(), turn, round: RoundCalls::default(), runs_sent: 0 };
        Ok(drive::stream(upstream, shape, Vec::new()))
    }
}

/// A streamed session chat: the contract's chunks.
struct ChatShape {
    app: App,
    turn: ChatTurn,
    /// The calls of the model's answer under way.
    round: RoundCalls,
    /// How many of the rounds' runs have been sent.
    runs_sent: usize,
}

/// The calls of one streamed answer: which of its calls (by index) the
/// server runs, and whether it calls a client tool.
#[derive(Default)]
struct RoundCalls {
    server: std::collections::HashMap<u32, bool>,
    client: bool,
}

impl ChatShape {
    /// A chunk of each run not sent yet.
    fn new_runs(&mut self) -> Vec<Result<ChatChunk>> {
        let runs = &self.turn.rounds.runs[self.runs_sent..];
        self.runs_sent = self.turn.rounds.runs.len();
        runs.iter().map(|run| Ok(ChatChunk { tool_run: Some(run.clone()), ..ChatChunk::default() })).collect()
    }

    /// `chunk` without the deltas of the server's calls, and without the
    /// finish reason `tool_calls` when the model called only the server's
    /// tools (the turn goes on).
    fn without_server_calls(&mut self, mut chunk: wire::CompletionChunk) -> wire::CompletionChunk {
        if self.turn.rounds.toolbox.is_empty() {
            return chunk;
        }
        for choice in &mut chunk.choices {
            if let Some(calls) = &mut choice.delta.tool_calls {
                for call in calls.iter() {
                    if let Some(name) = call.function.as_ref().and_then(|f| f.name.as_deref()) {
                        let server = self.turn.rounds.toolbox.get(name).is_some();
                        self.round.server.insert(call.index.unwrap_or_default(), server);
                        self.round.client |= !server;
                    }
                }
                calls.retain(|c| {
                    !self.round.server.get(&c.index.unwrap_or_default()).copied().unwrap_or(false)
                });
                if calls.is_empty() {
                    choice.delta.tool_calls = None;
                }
            }
            let only_server = !self.round.client && self.round.server.values().any(|s| *s);
            if only_server && choice.finish_reason.as_deref() == Some("tool_calls") {
                choice.finish_reason = None;
            }
        }
        chunk.choices.retain(|c| {
            c.finish_reason.is_some()
                || c.delta.tool_calls.is_some()
                || c.delta.content.as_deref().is_some_and(|t| !t.is_empty())
                || c.delta.refusal.is_some()
                || c.delta.role.is_some()
        });
        chunk
    }
}

impl Shape for ChatShape {
    type Item = Result<ChatChunk>;

    fn request(&self) -> &wire::CompletionRequest {
        &self.turn.plan.request
    }

    fn chunk(&mut self, chunk: wire::CompletionChunk, _first: (&str, &str), out: &mut VecDeque<Self::Item>) {
        let chunk = self.without_server_calls(chunk);
        // The usage-only chunk is replaced by the last one, which adds the docs.
        if !chunk.choices.is_empty() {
            out.push_back(Ok(contract_chunk(chunk)));
        }
    }

    fn end(&mut self, answered: Answered) -> BoxFuture<'_, Result<End<Self::Item>>> {
        Box::pin(async move {
            let t = self.turn.saving.tenant;
            let ending =
                match self.turn.rounds.after(&self.app, t, &answered, &mut self.turn.plan.request).await? {
                    After::Again => {
                        let upstream = self.turn.plan.provider.chat_stream(&self.turn.plan.request).await?;
                        self.round = RoundCalls::default();
                        return Ok(End::Again(upstream, self.new_runs()));
                    }
                    After::End(ending) => ending,
                };
            let replies = self.turn.rounds.to_save(&answered, &ending);
            self.turn.saving.with_round_ids(&self.turn.rounds, &ending);
            self.app.save_chat_turn(&self.turn, replies, None::<&()>).await?;
            let model = answered.model_or(&self.turn.plan.request);
            let mut last = self.new_runs();
            if let Some(reason) = ending.finish_reason.clone() {
                last.push(Ok(ChatChunk {
                    id: answered.id.clone(),
                    model: model.clone(),
                    choices: vec![ChatChunkChoice {
                        finish_reason: Some(reason),
                        ..ChatChunkChoice::default()
                    }],
                    ..ChatChunk::default()
                }));
            }
            last.push(Ok(ChatChunk {
                id: answered.id.clone(),
                object: Some("chat.completion.chunk".to_owned()),
                model,
                choices: Vec::new(),
                usage: Some(self.turn.rounds.total_usage(&answered.usage)),
                docs: Some(self.turn.plan.docs.clone()),
                tool_run: None,
                pending_approvals: (!ending.pending.is_empty()).then(|| ending.pending.clone()),
            }));
            Ok(End::Done(last))
        })
    }

    fn failure(&mut self, error: Error) -> Self::Item {
        Err(error)
    }
}

/// The contract's answer from the provider's last, and the rounds before it.
fn chat_response(plan: &Plan, rounds: &mut Rounds, answered: Answered, ending: Ending) -> ChatResponse {
    let model = answered.model_or(&plan.request);
    let usage = rounds.total_usage(&answered.usage);
    let Ending { finish_reason, client_calls, saved, pending } = ending;
    ChatResponse {
        id: answer_id(&answered.id),
        created_at: Utc::now(),
        model,
        choices: answered
            .answer
            .choices
            .into_iter()
            .map(|c| ChatChoice {
                index: c.index.into(),
                finish_reason: finish_reason.clone().or(c.finish_reason),
                message: ChatAnswerMessage {
                    role: Role::Assistant,
                    content: c.message.content.map(|content| content.text().into_owned()),
                    tool_calls: match (saved, &client_calls) {
                        // The server's calls ran, wait, or met a limit: the client sees its own.
                        (true, Some(client)) => Some(client.iter().map(from_wire_call).collect()),
                        (true, None) => None,
                        (false, _) => c
                            .message
                            .tool_calls
                            .filter(|cs| !cs.is_empty())
                            .map(|cs| cs.iter().map(from_wire_call).collect()),
                    },
                },
            })
            .collect(),
        usage,
        docs: plan.docs.clone(),
        tool_runs: std::mem::take(&mut rounds.runs),
        pending_approvals: pending,
    }
}
