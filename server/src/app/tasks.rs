//! Tasks of an agent: create-or-update, read, list, delete.
//!
//! A task is a record scoped by its agent, its name the record's unique name
//! there. `PUT /api/agents/{id}/tasks` finds its target by id, else by name,
//! and writes it with a precondition (absent, or the version read), retrying
//! when a concurrent writer got there first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::records::{RETRIES, Resource, decode, encode};
use super::stored::StoredToolDef;
use super::{App, Error, Result, Tenant};
use crate::api::types::Metadata;
use crate::api::types::{PutTaskRequest, Task};
use crate::store::{Expect, Kind, ListQuery, Op, Record, StoreError, now};

/// A task's stored fields (besides id, agent, timestamps and metadata).
#[derive(Serialize, Deserialize)]
pub struct TaskData {
    pub name: String,
    pub description: String,
    pub input_schema: Option<Map<String, Value>>,
    pub main: Vec<Map<String, Value>>,
    /// The named sub-workflows; absent from tasks stored by release 0.1.0,
    /// and left out when there are none (so such a task is stored as 0.1.0 stored it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workflows: BTreeMap<String, Vec<Map<String, Value>>>,
    pub tools: Vec<StoredToolDef>,
    pub inherit_tools: bool,
}

impl Resource for Task {
    const KIND: Kind = Kind::Task;
    type Data = TaskData;
    fn from_parts(rec: &Record, d: TaskData) -> Self {
        Task {
            id: rec.id,
            agent_id: rec.scope,
            name: d.name,
            description: d.description,
            input_schema: d.input_schema,
            main: d.main,
            workflows: d.workflows,
            tools: d.tools.into_iter().map(Into::into).collect(),
            inherit_tools: d.inherit_tools,
            metadata: rec.metadata.clone().map(Metadata),
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

/// What a task's body stores: its sub-workflows gathered from `workflows` and
/// the body's top-level keys alike.
fn task_data(req: &PutTaskRequest) -> TaskData {
    TaskData {
        name: req.name.clone(),
        description: req.description.clone(),
        input_schema: req.input_schema.clone(),
        main: req.main.clone(),
        workflows: req.all_workflows(),
        tools: req.tools.iter().cloned().map(StoredToolDef::from).collect(),
        inherit_tools: req.inherit_tools,
    }
}

impl App {
    /// Creates or overwrites a task (see [`PutTaskRequest`] for which one).
    pub async fn task_put(&self, t: Tenant, agent: Uuid, req: PutTaskRequest) -> Result<Task> {
        let data: Value = encode(&task_data(&req))?;
        // One writer of an agent's tasks at a time: the target (by id or by name)
        // is read and written under the lock, so concurrent puts queue.
        let _queue = self.lock_record(t, Kind::Task, agent).await;
        for _ in 0..RETRIES {
            self.load(t, Kind::Agent, agent).await?;
            let target = match req.id {
                Some(id) => self.store.get(t.0, Kind::Task, id).await?,
                None => match self.store.lookup_unique(t.0, Kind::Task, agent, &req.name).await? {
                    Some(id) => self.store.get(t.0, Kind::Task, id).await?,
                    None => None,
                },
            };
            let (mut rec, expect) = match target {
                Some(old) if old.scope != agent => {
                    return Err(Error::Conflict(format!("task {} belongs to another agent", old.id)));
                }
                Some(mut old) => {
                    let version = old.version;
                    old.updated_at = now().max(old.created_at);
                    (old, Expect::Version(version))
                }
                None => {
                    let rec = match req.id {
                        Some(id) => Record::new(Kind::Task, id, agent, Value::Null),
                        None => Record::fresh(Kind::Task, agent, Value::Null),
                    };
                    (rec, Expect::Absent)
                }
            };
            rec.data = data.clone();
            rec.unique = Some(req.name.clone());
            rec.metadata = req.metadata.clone().map(Metadata::into_inner);
            let answer = decode::<Task>(&rec)?;
            let ops = vec![Op::Require { kind: Kind::Agent, id: agent }, Op::Put { record: rec, expect }];
            match self.store.commit(t.0, ops).await {
                Ok(()) => return Ok(answer),
                // Someone wrote the target first, or created it under our id or
                // (when we create by name) our name: read again.
                Err(StoreError::Stale | StoreError::IdTaken { .. }) => continue,
                Err(StoreError::Duplicate { .. }) if req.id.is_none() && expect == Expect::Absent => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Stale.into())
    }

    /// Creates a task (201). Its name must be free in the agent: a clash is a
    /// 409 (the store's unique name), as is an `id` that a record has already.
    pub async fn task_create(&self, t: Tenant, agent: Uuid, req: PutTaskRequest) -> Result<Task> {
        let data = encode(&task_data(&req))?;
        let mut rec = match req.id {
            Some(id) => Record::new(Kind::Task, id, agent, data),
            None => Record::fresh(Kind::Task, agent, data),
        };
        rec.unique = Some(req.name);
        rec.metadata = req.metadata.map(Metadata::into_inner);
        self.insert_resource(t, rec, vec![Op::Require { kind: Kind::Agent, id: agent }]).await
    }

    /// A task by its id alone (any agent's of the tenant).
    pub async fn task_get_by_id(&self, t: Tenant, id: Uuid) -> Result<Task> {
        decode(&self.load(t, Kind::Task, id).await?)
    }

    pub async fn task_get(&self, t: Tenant, agent: Uuid, id: Uuid) -> Result<Task> {
        self.load(t, Kind::Agent, agent).await?;
        decode(&self.load_in(t, Kind::Task, agent, id).await?)
    }

    /// The agent's tasks (404 if the agent does not exist).
    pub async fn task_list(&self, t: Tenant, agent: Uuid, q: &ListQuery) -> Result<Vec<Task>> {
        self.load(t, Kind::Agent, agent).await?;
        self.list_resources(t, agent, q).await
    }

    pub async fn task_delete(&self, t: Tenant, agent: Uuid, id: Uuid) -> Result<()> {
        self.load(t, Kind::Agent, agent).await?;
        self.load_in(t, Kind::Task, agent, id).await?;
        Ok(self.store.commit(t.0, vec![Op::Delete { kind: Kind::Task, id, version: None }]).await?)
    }
}
