//! Agents: create, read, list, overwrite, patch, delete (with cascade).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::{Resource, encode, merge_metadata};
use super::stored::StoredChatSettings;
use super::{App, Error, Result, Tenant};
use crate::api::types::{
    Agent, ChatSettings, CreateAgentRequest, DocOwner, Metadata, OwnerRole, PatchAgentRequest,
};
use crate::store::{Kind, ListQuery, Record, new_id};

/// An agent's stored fields (besides id, timestamps and metadata).
#[derive(Serialize, Deserialize)]
pub struct AgentData {
    pub name: String,
    pub about: String,
    pub model: String,
    pub instructions: Vec<String>,
    pub default_settings: Option<StoredChatSettings>,
}

impl Resource for Agent {
    const KIND: Kind = Kind::Agent;
    type Data = AgentData;
    fn from_parts(rec: &Record, d: AgentData) -> Self {
        Agent {
            id: rec.id,
            name: d.name,
            about: d.about,
            model: d.model,
            instructions: d.instructions,
            default_settings: d.default_settings.map(ChatSettings::from),
            metadata: rec.metadata.clone().map(Metadata),
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

fn agent_data(req: &CreateAgentRequest) -> AgentData {
    AgentData {
        name: req.name.clone(),
        about: req.about.clone(),
        model: req.model.clone(),
        instructions: req.instructions.clone().into_vec(),
        default_settings: req.default_settings.clone().map(StoredChatSettings::from),
    }
}

impl App {
    pub async fn agent_create(&self, t: Tenant, req: CreateAgentRequest) -> Result<Agent> {
        let mut rec = Record::new(Kind::Agent, new_id(), Uuid::nil(), encode(&agent_data(&req))?);
        rec.metadata = req.metadata.map(Metadata::into_inner);
        self.insert_resource(t, rec, vec![]).await
    }

    pub async fn agent_get(&self, t: Tenant, id: Uuid) -> Result<Agent> {
        self.get_resource(t, id).await
    }

    pub async fn agent_list(&self, t: Tenant, q: &ListQuery) -> Result<Vec<Agent>> {
        self.list_resources(t, Uuid::nil(), q).await
    }

    pub async fn agent_update(&self, t: Tenant, id: Uuid, req: CreateAgentRequest) -> Result<Agent> {
        let data = encode(&agent_data(&req))?;
        self.update_resource(t, id, |rec| {
            rec.data = data.clone();
            rec.metadata = req.metadata.clone().map(Metadata::into_inner);
            Ok(())
        })
        .await
    }

    pub async fn agent_patch(&self, t: Tenant, id: Uuid, req: PatchAgentRequest) -> Result<Agent> {
        self.update_resource(t, id, |rec| {
            let mut d: AgentData =
                serde_json::from_value(rec.data.clone()).map_err(|e| Error::Internal(e.to_string()))?;
            if let Some(v) = &req.name {
                d.name = v.clone();
            }
            if let Some(v) = &req.about {
                d.about = v.clone();
            }
            if let Some(v) = &req.model {
                d.model = v.clone();
            }
            if let Some(v) = &req.instructions {
                d.instructions = v.clone().into_vec();
            }
            if let Some(v) = &req.default_settings {
                d.default_settings = v.clone().map(StoredChatSettings::from);
            }
            rec.data = encode(&d)?;
            rec.metadata = merge_metadata(rec.metadata.take(), req.metadata.clone())?;
            Ok(())
        })
        .await
    }

    pub async fn agent_delete(&self, t: Tenant, id: Uuid) -> Result<()> {
        self.delete_participant(
            t,
            Kind::Agent,
            id,
            &[Kind::Doc, Kind::Tool, Kind::Task, Kind::LearningPolicy],
        )
        .await?;
        self.forget_docs_of(t, DocOwner { id, role: OwnerRole::Agent }).await;
        Ok(())
    }
}
