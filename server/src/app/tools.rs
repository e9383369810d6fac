//! Tools of an agent: create, list, overwrite, patch, delete.
//!
//! A tool is a record scoped by its agent, its name the record's unique name
//! there (a clash is a 409). Writes require the agent in the same commit, so a
//! tool never outlives its agent.

use uuid::Uuid;

use super::records::{Resource, decode_data, encode, ensure_scope, merge_metadata};
use super::stored::StoredToolDef;
use super::{App, Error, Result, Tenant};
use crate::api::types::Metadata;
use crate::api::types::{CreateToolRequest, PatchToolRequest, Tool, ToolDef, check_tool_def};
use crate::api::validate::{Issues, Source};
use crate::store::{Kind, ListQuery, Op, Record};

impl Resource for Tool {
    const KIND: Kind = Kind::Tool;
    /// A tool's stored fields (besides id, agent, timestamps and metadata) are
    /// those of a tool given inline in a task.
    type Data = StoredToolDef;
    fn from_parts(rec: &Record, d: StoredToolDef) -> Self {
        let ToolDef { name, kind, description, function, api_call, mcp } = d.into();
        Tool {
            id: rec.id,
            agent_id: rec.scope,
            name,
            kind,
            description,
            function,
            api_call,
            mcp,
            metadata: rec.metadata.clone().map(Metadata),
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

fn tool_data(req: &CreateToolRequest) -> StoredToolDef {
    StoredToolDef::from(ToolDef {
        name: req.name.clone(),
        kind: req.kind,
        description: req.description.clone(),
        function: req.function.clone(),
        api_call: req.api_call.clone(),
        mcp: req.mcp.clone(),
    })
}

impl App {
    pub async fn tool_create(&self, t: Tenant, agent: Uuid, req: CreateToolRequest) -> Result<Tool> {
        let mut rec = Record::fresh(Kind::Tool, agent, encode(&tool_data(&req))?);
        rec.unique = Some(req.name);
        rec.metadata = req.metadata.map(Metadata::into_inner);
        self.insert_resource(t, rec, vec![Op::Require { kind: Kind::Agent, id: agent }]).await
    }

    /// The agent's tools (404 if the agent does not exist).
    pub async fn tool_list(&self, t: Tenant, agent: Uuid, q: &ListQuery) -> Result<Vec<Tool>> {
        self.load(t, Kind::Agent, agent).await?;
        self.list_resources(t, agent, q).await
    }

    pub async fn tool_update(
        &self,
        t: Tenant,
        agent: Uuid,
        id: Uuid,
        req: CreateToolRequest,
    ) -> Result<Tool> {
        self.load(t, Kind::Agent, agent).await?;
        let data = encode(&tool_data(&req))?;
        self.update_resource(t, id, |rec| {
            ensure_scope(rec, agent)?;
            rec.data = data.clone();
            rec.unique = Some(req.name.clone());
            rec.metadata = req.metadata.clone().map(Metadata::into_inner);
            Ok(())
        })
        .await
    }

    pub async fn tool_patch(&self, t: Tenant, agent: Uuid, id: Uuid, req: PatchToolRequest) -> Result<Tool> {
        self.load(t, Kind::Agent, agent).await?;
        self.update_resource(t, id, |rec| {
            ensure_scope(rec, agent)?;
            let mut d = ToolDef::from(decode_data::<Tool>(rec)?);
            if let Some(v) = &req.name {
                d.name = v.clone();
            }
            if let Some(v) = &req.description {
                d.description = v.clone();
            }
            if let Some(kind) = req.kind.filter(|k| *k != d.kind) {
                // The old type's definition goes with it, unless it is sent again.
                d.kind = kind;
                d.function = None;
                d.api_call = None;
                d.mcp = None;
            }
            if let Some(v) = &req.function {
                d.function = v.clone();
            }
            if let Some(v) = &req.api_call {
                d.api_call = v.clone();
            }
            if let Some(v) = &req.mcp {
                d.mcp = v.clone();
            }
            let mut issues = Issues::new(Source::Body);
            check_tool_def(
                d.kind,
                d.function.as_ref(),
                d.api_call.as_ref(),
                d.mcp.as_ref(),
                &[],
                &mut issues,
            );
            if !issues.is_empty() {
                return Err(Error::Validation(issues.into_vec()));
            }
            rec.unique = Some(d.name.clone());
            rec.data = encode(&StoredToolDef::from(d))?;
            rec.metadata = merge_metadata(rec.metadata.take(), req.metadata.clone())?;
            Ok(())
        })
        .await
    }

    pub async fn tool_delete(&self, t: Tenant, agent: Uuid, id: Uuid) -> Result<()> {
        self.load(t, Kind::Agent, agent).await?;
        self.load_in(t, Kind::Tool, agent, id).await?;
        Ok(self.store.commit(t.0, vec![Op::Delete { kind: Kind::Tool, id, version: None }]).await?)
    }
}
