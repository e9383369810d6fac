//! Request and response types of the API, one module per resource.
//!
//! Every bound, pattern and default is declared here, once, with serde and
//! schemars attributes: they appear in the OpenAPI document and are enforced
//! at runtime from the same schema (see [`crate::validate`]). Every type is
//! also re-exported here, so `types::Agent` names it wherever it lives.

pub mod agents;
pub mod chat;
pub mod common;
pub mod docs;
pub mod executions;
pub mod headers;
pub mod keys;
pub mod memory;
pub mod openai;
pub mod openai_embeddings;
pub mod openai_responses;
pub mod paging;
pub mod search;
pub mod secrets;
pub mod service;
pub mod sessions;
pub mod step_parser;
pub mod steps;
pub mod tasks;
pub mod tools;
pub mod users;

pub use agents::*;
pub use chat::*;
pub use common::*;
pub use docs::*;
pub use executions::*;
pub use headers::*;
pub use keys::*;
pub use memory::*;
pub use openai::*;
pub use openai_embeddings::*;
pub use openai_responses::*;
pub use paging::*;
pub use search::*;
pub use secrets::*;
pub use service::*;
pub use sessions::*;
pub use step_parser::*;
pub use steps::*;
pub use tasks::*;
pub use tools::*;
pub use users::*;
