//! Letta Agent Files (`.af`, github.com/letta-ai/agent-file): import and export.
//!
//! Import reads the whole file first ([`parse::plan`], where the mapping of
//! each part is said): a file that is not an Agent File is a 422 and nothing
//! is written. Then it makes each agent with the domain's own functions (the
//! agent, its blocks with edit op `import`, its tools, a session with its
//! messages). If any of that fails, the agents made so far are deleted, and
//! with them everything the import made for them (deleting an agent deletes
//! its tools, blocks and their edits, and the sessions in which it is the
//! only agent): a failed import leaves the store as it was. A server that
//! stops part-way leaves the agents made until then.
//!
//! Export ([`export::file`]) writes the current format.

pub mod export;
pub mod parse;
#[cfg(test)]
mod tests;

use uuid::Uuid;

use super::idempotency::Claim;
use super::memory::{Provenance, StoredEditOp};
use super::sessions::plain_session;
use super::{App, Error, Result, Tenant};
use crate::api::types::{AgentFile, AgentFileImport, DocOwner, ImportedAgent, OwnerRole};
use crate::store::{Direction, Kind, ListQuery};

/// Messages are appended this many per commit.
const MESSAGES_PER_COMMIT: usize = 500;

impl App {
    /// Makes the agents of an Agent File (see [`parse`] for what becomes
    /// what), their messages in a session with `user` when given (a 404 if
    /// that user does not exist, and nothing is made).
    pub async fn agent_import(
        &self,
        t: Tenant,
        user: Option<Uuid>,
        file: AgentFile,
    ) -> Result<AgentFileImport> {
        let plan = parse::plan(&file.0).map_err(Error::Validation)?;
        self.import_plan(t, user, plan).await
    }

    /// Makes what `plan` says; on any failure, deletes what it made.
    async fn import_plan(&self, t: Tenant, user: Option<Uuid>, plan: parse::Plan) -> Result<AgentFileImport> {
        if let Some(user) = user {
            self.load(t, Kind::User, user).await?;
        }
        let mut made = Vec::new();
        // The import is many commits: its answer is remembered for its
        // Idempotency-Key once it is whole, not with its first commit.
        let result = Claim::hidden(async {
            let mut agents = Vec::new();
            for p in plan.agents {
                agents.push(self.import_agent(t, user, p, &mut made).await?);
            }
            Ok::<_, Error>(agents)
        })
        .await;
        match result {
            Ok(agents) => Ok(AgentFileImport { agents, unmapped: plan.unmapped }),
            Err(e) => {
                for id in made {
                    if let Err(undo) = self.agent_delete(t, id).await {
                        return Err(Error::StoreUnavailable(format!(
                            "the import failed ({e}), and agent {id} it had made could not be deleted ({undo}): delete it"
                        )));
                    }
                }
                Err(e)
            }
        }
    }

    /// Makes one agent of a plan; its id goes into `made` as soon as it exists.
    async fn import_agent(
        &self,
        t: Tenant,
        user: Option<Uuid>,
        p: parse::AgentPlan,
        made: &mut Vec<Uuid>,
    ) -> Result<ImportedAgent> {
        let agent = self.agent_create(t, p.agent).await?;
        made.push(agent.id);
        let owner = DocOwner { id: agent.id, role: OwnerRole::Agent };
        let source = Provenance { agent_id: Some(agent.id), ..Provenance::default() };
        let mut blocks = Vec::with_capacity(p.blocks.len());
        for b in p.blocks {
            blocks.push(self.block_create_as(t, owner, b, StoredEditOp::Import, source.clone()).await?);
        }
        let mut tools = Vec::with_capacity(p.tools.len());
        for tool in p.tools {
            tools.push(self.tool_create(t, agent.id, tool).await?);
        }
        let mut session_id = None;
        let count = p.messages.len();
        if count > 0 {
            let mut req = plain_session(Some(agent.id), None);
            req.user = user;
            let session = self.session_create(t, req).await?;
            session_id = Some(session.id);
            let mut rest = p.messages;
            while !rest.is_empty() {
                let tail = rest.split_off(rest.len().min(MESSAGES_PER_COMMIT));
                self.append_messages(t, session.id, rest, |_| None::<()>).await?;
                rest = tail;
            }
        }
        Ok(ImportedAgent { source_id: p.source_id, agent, blocks, tools, session_id, messages: count as i64 })
    }

    /// An agent as an Agent File (see [`export::file`]), with the last
    /// [`parse::MAX_MESSAGES`] messages of `session` when given (a 404 if it
    /// is not a session of this agent).
    pub async fn agent_export(&self, t: Tenant, agent_id: Uuid, session: Option<Uuid>) -> Result<AgentFile> {
        let agent = self.agent_get(t, agent_id).await?;
        let mut messages = Vec::new();
        if let Some(session) = session {
            let found = self.session_get(t, session).await?;
            if !found.agents.contains(&agent_id) {
                return Err(Error::not_found(Kind::Session, session));
            }
            let mut q = ListQuery::oldest_first(0, parse::MAX_MESSAGES);
            q.direction = Direction::Desc;
            messages = self.message_list(t, session, &q).await?;
            messages.reverse();
        }
        let blocks = self.blocks_of(t, agent_id).await?;
        let tools = self.tool_list(t, agent_id, &ListQuery::oldest_first(0, usize::MAX)).await?;
        Ok(AgentFile(export::file(&agent, &blocks, &tools, &messages, chrono::Utc::now())))
    }
}
