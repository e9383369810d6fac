//! Letta Agent Files (`.af`): import and export.

use uuid::Uuid;

use super::{App, Error, Result, Tenant};
use crate::api::types::{AgentFile, AgentFileImport};

impl App {
    /// Makes the agents of an Agent File.
    pub async fn agent_import(
        &self,
        _t: Tenant,
        _user: Option<Uuid>,
        _file: AgentFile,
    ) -> Result<AgentFileImport> {
        Err(Error::BadRequest("importing Agent Files is not built yet".into()))
    }

    /// An agent as an Agent File.
    pub async fn agent_export(&self, _t: Tenant, _agent: Uuid, _session: Option<Uuid>) -> Result<AgentFile> {
        Err(Error::BadRequest("exporting Agent Files is not built yet".into()))
    }
}
