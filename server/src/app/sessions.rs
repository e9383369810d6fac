//! Sessions: create (with their participants), read, list, merge-update, delete
//! (with their messages), and the tools of their agents.
//!
//! A session names its agents and users in `data` and in `refs`, so deleting a
//! participant finds it (see [`App::delete_participant`]). Creating one touches
//! every participant in the same commit: a participant deleted meanwhile either
//! fails the create (404) or, having read the sessions before it, retries and
//! sees this one. No session outlives its last agent or user.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::{Resource, decode_data, encode, merge_metadata};
use super::stored::StoredContextOverflow;
use super::{App, Error, Result, Tenant};
use crate::api::error::{Issue, LocPart};
use crate::api::types::Metadata;
use crate::api::types::Tool;
use crate::api::types::{
    ContextOverflow, CreateSessionRequest, Session, SessionMcpServer, UpdateSessionRequest,
};
use crate::store::{Kind, ListQuery, Op, Record};

/// A session's stored fields (besides id, timestamps and metadata).
#[derive(Serialize, Deserialize)]
pub struct SessionData {
    pub agents: Vec<Uuid>,
    pub users: Vec<Uuid>,
    pub situation: Option<String>,
    pub system_template: Option<String>,
    pub render_templates: bool,
    pub token_budget: Option<i64>,
    pub context_overflow: Option<StoredContextOverflow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<SessionMcpServer>,
}

impl Resource for Session {
    const KIND: Kind = Kind::Session;
    type Data = SessionData;
    fn from_parts(rec: &Record, d: SessionData) -> Self {
        Session {
            id: rec.id,
            agents: d.agents,
            users: d.users,
            situation: d.situation,
            system_template: d.system_template,
            render_templates: d.render_templates,
            token_budget: d.token_budget,
            context_overflow: d.context_overflow.map(ContextOverflow::from),
            mcp_servers: d.mcp_servers,
            metadata: rec.metadata.clone().map(Metadata),
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

/// `one` or `many` (validation saw to it that not both), first occurrences kept in order.
fn participants(one: Option<Uuid>, many: Option<Vec<Uuid>>) -> Vec<Uuid> {
    let mut out: Vec<Uuid> = Vec::new();
    for id in one.into_iter().chain(many.into_iter().flatten()) {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// What the OpenAI-compatible routes create: a session of at most one agent
/// and no user, with the default settings, but not rendering messages as
/// templates (OpenAI's clients send text).
pub(super) fn plain_session(agent: Option<Uuid>, metadata: Option<Metadata>) -> CreateSessionRequest {
    CreateSessionRequest {
        agent,
        agents: None,
        user: None,
        users: None,
        situation: None,
        system_template: None,
        render_templates: false,
        token_budget: None,
        context_overflow: None,
        mcp_servers: None,
        metadata,
    }
}

/// The kinds of record in a session's scope, deleted with it.
pub const SESSION_SCOPED: [Kind; 2] = [Kind::Message, Kind::Response];

/// A new session's record, and the ops that check and touch its participants
/// (in the commit that inserts it).
pub(super) fn session_record(req: CreateSessionRequest) -> Result<(Record, Vec<Op>)> {
    let agents = participants(req.agent, req.agents);
    let users = participants(req.user, req.users);
    let data = SessionData {
        agents: agents.clone(),
        users: users.clone(),
        situation: req.situation,
        system_template: req.system_template,
        render_templates: req.render_templates,
        token_budget: req.token_budget,
        context_overflow: req.context_overflow.map(StoredContextOverflow::from),
        mcp_servers: req.mcp_servers.unwrap_or_default(),
    };
    let mut rec = Record::fresh(Kind::Session, Uuid::nil(), encode(&data)?);
    rec.metadata = req.metadata.map(Metadata::into_inner);
    let mut ops = Vec::new();
    let named = agents.iter().map(|id| (Kind::Agent, *id)).chain(users.iter().map(|id| (Kind::User, *id)));
    for (kind, id) in named {
        rec.refs.push(id);
        ops.push(Op::Require { kind, id });
        ops.push(Op::Touch { kind, id });
    }
    Ok((rec, ops))
}

/// Refuses (422 at `system_template`) a template that passes a bound of one
/// render whatever its context: one that would build too much, run too long
/// or write too much text. It renders once, on a blocking thread.
async fn check_system_template(template: Option<&str>) -> Result<()> {
    let Some(src) = template else { return Ok(()) };
    let src = src.to_owned();
    let checked = tokio::task::spawn_blocking(move || crate::models::template::check_bounds(&src))
        .await
        .map_err(|e| Error::Internal(format!("checking the system template: {e}")))?;
    checked.map_err(|e| {
        Error::Validation(vec![Issue {
            loc: vec![LocPart::Key("body".into()), LocPart::Key("system_template".into())],
            msg: format!("system_template cannot be rendered: {}", e.message),
            kind: "value_error".into(),
        }])
    })
}

impl App {
    pub async fn session_create(&self, t: Tenant, req: CreateSessionRequest) -> Result<Session> {
        check_system_template(req.system_template.as_deref()).await?;
        let (rec, ops) = session_record(req)?;
        self.insert_resource(t, rec, ops).await
    }

    pub async fn session_get(&self, t: Tenant, id: Uuid) -> Result<Session> {
        self.get_resource(t, id).await
    }

    pub async fn session_list(&self, t: Tenant, q: &ListQuery) -> Result<Vec<Session>> {
        self.list_resources(t, Uuid::nil(), q).await
    }

    /// Changes the fields sent (PUT and PATCH alike); the participants stay.
    pub async fn session_update(&self, t: Tenant, id: Uuid, req: UpdateSessionRequest) -> Result<Session> {
        check_system_template(req.system_template.as_ref().and_then(|t| t.as_deref())).await?;
        self.update_resource(t, id, |rec| {
            let mut d = decode_data::<Session>(rec)?;
            if let Some(v) = &req.situation {
                d.situation = v.clone();
            }
            if let Some(v) = &req.system_template {
                d.system_template = v.clone();
            }
            if let Some(v) = req.render_templates {
                d.render_templates = v;
            }
            if let Some(v) = req.token_budget {
                d.token_budget = v;
            }
            if let Some(v) = req.context_overflow {
                d.context_overflow = v.map(StoredContextOverflow::from);
            }
            if let Some(v) = &req.mcp_servers {
                d.mcp_servers = v.clone();
            }
            rec.data = encode(&d)?;
            rec.metadata = merge_metadata(rec.metadata.take(), req.metadata.clone())?;
            Ok(())
        })
        .await
    }

    /// Deletes a session and what is in its scope (messages, stored
    /// responses), in one commit.
    pub async fn session_delete(&self, t: Tenant, id: Uuid) -> Result<()> {
        let mut ops = vec![Op::Delete { kind: Kind::Session, id, version: None }];
        ops.extend(SESSION_SCOPED.map(|kind| Op::DeleteScope { kind, scope: id }));
        let deleted = self.store.commit(t.0, ops).await;
        self.history.forget(t, id);
        Ok(deleted?)
    }

    /// The tools of the session's agents: agent by agent, each agent's oldest first.
    pub async fn session_tools(&self, t: Tenant, id: Uuid) -> Result<Vec<Tool>> {
        let session: Session = self.get_resource(t, id).await?;
        let all = ListQuery::oldest_first(0, usize::MAX);
        let mut tools = Vec::new();
        for agent in session.agents {
            tools.extend(self.list_resources::<Tool>(t, agent, &all).await?);
        }
        Ok(tools)
    }
}
