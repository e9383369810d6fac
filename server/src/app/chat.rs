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

use super::turn::convert::{answer_id, contract_chunk, from_wire_call, reply_message};
use super::turn::drive::{self, Items};
use super::turn::plan::{New, tool_specs, wire_tool_choice};
use super::turn::{Answered, Ask, Driver, Plan, Saving, Shape, SystemFor};
use super::{App, Error, Result, Tenant};
use crate::api::types::Agent;
use crate::api::types::Role;
use crate::api::types::{ChatAnswerMessage, ChatChoice, ChatChunk, ChatRequest, ChatResponse};
use crate::models::wire;

/// The chunks of a streamed chat; it ends after the last chunk, or with one `Err`.
pub type ChatChunks = Items<Result<ChatChunk>>;

/// A session chat, planned: what to send, and where to save.
pub struct ChatTurn {
    plan: Plan,
    saving: Saving,
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
        let tools = tool_specs(&self.session_tools(t, session_id).await?, req.tools.as_deref());
        let history = self.history(t, session_id, held.version).await?;
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
                    instructions: None,
                    history: Some((&history, session)),
                    new: New::Saved(req.messages),
                    render_templates: true,
                    tool_choice: req.tool_choice.map(wire_tool_choice),
                    response_format: req
                        .response_format
                        .map(|f| serde_json::to_value(f).unwrap_or(serde_json::Value::Null)),
                    stream: req.stream,
                },
            )
            .await?;
        let saving = Saving {
            tenant: t,
            session: session_id,
            save: req.save,
            new_session: None,
            new_messages: std::mem::take(&mut plan.new_messages),
            ids: None,
            lease: held.lease,
            lock: Some(held.lock),
        };
        Ok(ChatTurn { plan, saving })
    }

    /// A chat answered whole: the model's answer, saved when `save`.
    pub async fn chat(&self, t: Tenant, session: Uuid, req: ChatRequest) -> Result<ChatResponse> {
        let turn = self.chat_turn(t, session, req).await?;
        let answer = turn.plan.provider.chat(&turn.plan.request).await?;
        let answered = Driver::whole(answer).collect(&turn.plan.request).await?;
        let reply = answered.answer.message().map(reply_message);
        let response = chat_response(&turn.plan, answered);
        self.save_turn(&turn.saving, reply, |_| Ok((Vec::new(), Some(&response)))).await?;
        Ok(response)
    }

    /// A chat answered chunk by chunk (see the module's docs). The provider's
    /// stream is opened first, so a provider that fails at once is an ordinary error.
    pub async fn chat_stream(&self, t: Tenant, session: Uuid, req: ChatRequest) -> Result<ChatChunks> {
        let turn = self.chat_turn(t, session, req).await?;
        let upstream = turn.plan.provider.chat_stream(&turn.plan.request).await?;
        Ok(drive::stream(upstream, ChatShape { app: self.clone(), turn }, Vec::new()))
    }
}

/// A streamed session chat: the contract's chunks.
struct ChatShape {
    app: App,
    turn: ChatTurn,
}

impl Shape for ChatShape {
    type Item = Result<ChatChunk>;

    fn request(&self) -> &wire::CompletionRequest {
        &self.turn.plan.request
    }

    fn chunk(&mut self, chunk: wire::CompletionChunk, _first: (&str, &str), out: &mut VecDeque<Self::Item>) {
        // The usage-only chunk is replaced by the last one, which adds the docs.
        if !chunk.choices.is_empty() {
            out.push_back(Ok(contract_chunk(chunk)));
        }
    }

    fn end(&mut self, answered: Answered) -> BoxFuture<'_, Result<Vec<Self::Item>>> {
        Box::pin(async move {
            let reply = answered.answer.message().map(reply_message);
            self.app.save_turn(&self.turn.saving, reply, |_| Ok((Vec::new(), None::<()>))).await?;
            let model = answered.model_or(&self.turn.plan.request);
            Ok(vec![Ok(ChatChunk {
                id: answered.id,
                object: Some("chat.completion.chunk".to_owned()),
                model,
                choices: Vec::new(),
                usage: Some(answered.usage),
                docs: Some(self.turn.plan.docs.clone()),
            })])
        })
    }

    fn failure(&mut self, error: Error) -> Self::Item {
        Err(error)
    }
}

/// The contract's answer from the provider's.
fn chat_response(plan: &Plan, answered: Answered) -> ChatResponse {
    let model = answered.model_or(&plan.request);
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
                finish_reason: c.finish_reason,
                message: ChatAnswerMessage {
                    role: Role::Assistant,
                    content: c.message.content.map(|content| content.text().into_owned()),
                    tool_calls: c
                        .message
                        .tool_calls
                        .filter(|cs| !cs.is_empty())
                        .map(|cs| cs.iter().map(from_wire_call).collect()),
                },
            })
            .collect(),
        usage: answered.usage,
        docs: plan.docs.clone(),
    }
}
