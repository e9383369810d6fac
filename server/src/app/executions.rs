//! Executions of tasks: start, read, list, cancel or resume, and their
//! transitions. The engine that runs them is [`crate::exec`].

use futures::stream::BoxStream;
use uuid::Uuid;

use super::{App, Error, Result, Tenant};
use crate::api::types::{CreateExecutionRequest, Execution, Transition, UpdateExecutionRequest};
use crate::store::ListQuery;

fn not_yet() -> Error {
    Error::Internal("executions are being built".into())
}

impl App {
    /// Starts an execution of a task (201): `input` is checked against the
    /// task's `input_schema` (a 422 at `["body","input",…]`).
    pub async fn execution_start(&self, _t: Tenant, _task: Uuid, _req: CreateExecutionRequest) -> Result<Execution> {
        Err(not_yet())
    }

    /// The task's executions (404 if the task does not exist).
    pub async fn execution_list(&self, _t: Tenant, _task: Uuid, _q: &ListQuery) -> Result<Vec<Execution>> {
        Err(not_yet())
    }

    pub async fn execution_get(&self, _t: Tenant, _id: Uuid) -> Result<Execution> {
        Err(not_yet())
    }

    /// Cancels, or resumes with input (a change the status table forbids is a 409).
    pub async fn execution_update(&self, _t: Tenant, _id: Uuid, _req: UpdateExecutionRequest) -> Result<Execution> {
        Err(not_yet())
    }

    /// The execution's transitions, in the order asked for (oldest first by default).
    pub async fn transition_list(&self, _t: Tenant, _execution: Uuid, _q: &ListQuery) -> Result<Vec<Transition>> {
        Err(not_yet())
    }

    pub async fn transition_get(&self, _t: Tenant, _execution: Uuid, _id: Uuid) -> Result<Transition> {
        Err(not_yet())
    }

    /// Every transition after `after` (all of them when `None`), then each new
    /// one as it commits; the stream ends after a terminal transition. 404
    /// (before the stream starts) when the execution does not exist.
    pub async fn transition_follow(
        &self,
        _t: Tenant,
        _execution: Uuid,
        _after: Option<Uuid>,
    ) -> Result<BoxStream<'static, Result<Transition>>> {
        Err(not_yet())
    }
}
