//! Users: create, read, list, overwrite, patch, delete (with cascade).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::{Resource, encode, merge_metadata};
use super::{App, Result, Tenant};
use crate::api::types::{
    CreateUserRequest, DocOwner, Metadata, OwnerRole, PatchUserRequest, UpdateUserRequest, User,
};
use crate::store::{Kind, ListQuery, Record, new_id};

/// A user's stored fields (besides id, timestamps and metadata).
#[derive(Serialize, Deserialize)]
pub struct UserData {
    pub name: String,
    pub about: String,
    pub project: Option<String>,
}

impl Resource for User {
    const KIND: Kind = Kind::User;
    type Data = UserData;
    fn from_parts(rec: &Record, d: UserData) -> Self {
        User {
            id: rec.id,
            name: d.name,
            about: d.about,
            metadata: rec.metadata.clone().map(Metadata),
            project: d.project,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

impl App {
    pub async fn user_create(&self, t: Tenant, req: CreateUserRequest) -> Result<User> {
        let data = UserData { name: req.name.unwrap_or_default(), about: req.about, project: req.project };
        let mut rec = Record::new(Kind::User, new_id(), Uuid::nil(), encode(&data)?);
        rec.metadata = req.metadata.map(Metadata::into_inner);
        self.insert_resource(t, rec, vec![]).await
    }

    pub async fn user_get(&self, t: Tenant, id: Uuid) -> Result<User> {
        self.get_resource(t, id).await
    }

    pub async fn user_list(&self, t: Tenant, q: &ListQuery) -> Result<Vec<User>> {
        self.list_resources(t, Uuid::nil(), q).await
    }

    pub async fn user_update(&self, t: Tenant, id: Uuid, req: UpdateUserRequest) -> Result<User> {
        let data =
            encode(&UserData { name: req.name.unwrap_or_default(), about: req.about, project: req.project })?;
        self.update_resource(t, id, |rec| {
            rec.data = data.clone();
            rec.metadata = req.metadata.clone().map(Metadata::into_inner);
            Ok(())
        })
        .await
    }

    pub async fn user_patch(&self, t: Tenant, id: Uuid, req: PatchUserRequest) -> Result<User> {
        self.update_resource(t, id, |rec| {
            let mut d: UserData = serde_json::from_value(rec.data.clone())
                .map_err(|e| super::Error::Internal(e.to_string()))?;
            if let Some(name) = &req.name {
                d.name = name.clone();
            }
            if let Some(about) = &req.about {
                d.about = about.clone();
            }
            if let Some(project) = &req.project {
                d.project = project.clone();
            }
            rec.data = encode(&d)?;
            rec.metadata = merge_metadata(rec.metadata.take(), req.metadata.clone())?;
            Ok(())
        })
        .await
    }

    pub async fn user_delete(&self, t: Tenant, id: Uuid) -> Result<()> {
        self.delete_participant(t, Kind::User, id, &[Kind::Doc]).await?;
        self.forget_docs_of(t, DocOwner { id, role: OwnerRole::User }).await;
        Ok(())
    }
}
