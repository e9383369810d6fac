//! TEMPORARY (helper B's real one replaces this file).
use std::time::Duration;
pub struct ApiCallPolicy {
    pub allowed_hosts: Vec<String>,
    pub max_timeout: Duration,
}
