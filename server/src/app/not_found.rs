//! What a 404 says was not found: a kind of resource and what named it,
//! typed, so that code can tell one missing thing from another without
//! reading a message; [`fmt::Display`] writes the message clients get.

use std::fmt;

use uuid::Uuid;

use crate::store::Kind;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// A record of `kind` with `id` (or not the tenant's): "agent 0193… not found".
    Record { kind: Kind, id: Uuid },
    /// An item of a conversation, by its item id.
    ConversationItem { conversation: Uuid, item: String },
    /// An item of a stored response's input, by its item id.
    ResponseInputItem { response: String, item: String },
    /// A stored response, by its id (never stored, or deleted).
    Response { id: String },
    /// An execution under way in this store (the operator's cancel).
    ExecutionUnderWay { id: Uuid },
    /// An API key, by what the operator gave (an id, a prefix, a key).
    KeyMatching { which: String },
    /// The agent a model name names.
    ModelAgent { model: String },
    /// A model, by its id: no agent of the tenant, and no provider lists it.
    Model { model: String },
    /// A secret of the tenant, by its name.
    Secret { name: String },
    /// What a request's field names: the field, then what is missing.
    Field { field: &'static str, missing: Box<NotFound> },
}

impl NotFound {
    /// What `field` names is missing.
    pub fn in_field(self, field: &'static str) -> Self {
        NotFound::Field { field, missing: Box::new(self) }
    }
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFound::Record { kind, id } => write!(f, "{} {id} not found", kind.name()),
            NotFound::ConversationItem { conversation, item } => {
                write!(f, "no item {item} in conversation {conversation}")
            }
            NotFound::ResponseInputItem { response, item } => {
                write!(f, "no item {item} in the input of {response}")
            }
            NotFound::Response { id } => write!(f, "no response {id} (it was not stored, or was deleted)"),
            NotFound::ExecutionUnderWay { id } => {
                write!(f, "no execution {id} is under way in this store: it has ended, or there is none")
            }
            NotFound::KeyMatching { which } => {
                write!(f, "no key matches '{which}'; see `agent-platform keys list`")
            }
            NotFound::ModelAgent { model } => {
                write!(f, "model {model}: no agent of yours has this id (GET /v1/models lists the models)")
            }
            NotFound::Model { model } => write!(
                f,
                "model '{model}' not found: no agent of yours has this id and no provider lists it \
                 (GET /v1/models lists the models)"
            ),
            NotFound::Secret { name } => write!(f, "secret '{name}' not found"),
            NotFound::Field { field, missing } => write!(f, "{field}: {missing}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages clients get (the end-to-end tests assert several).
    #[test]
    fn each_kind_says_what_was_not_found_and_what_named_it() {
        let id = Uuid::nil();
        let item = || "msg_1".to_string();
        let cases = [
            (NotFound::Record { kind: Kind::Agent, id }, format!("agent {id} not found")),
            (
                NotFound::ConversationItem { conversation: id, item: item() }.in_field("after"),
                format!("after: no item msg_1 in conversation {id}"),
            ),
            (
                NotFound::ResponseInputItem { response: "resp_1".into(), item: item() }.in_field("after"),
                "after: no item msg_1 in the input of resp_1".to_string(),
            ),
            (
                NotFound::Response { id: "resp_1".into() }.in_field("previous_response_id"),
                "previous_response_id: no response resp_1 (it was not stored, or was deleted)".to_string(),
            ),
            (
                NotFound::ExecutionUnderWay { id },
                format!("no execution {id} is under way in this store: it has ended, or there is none"),
            ),
            (
                NotFound::KeyMatching { which: "ab".into() },
                "no key matches 'ab'; see `agent-platform keys list`".to_string(),
            ),
            (
                NotFound::ModelAgent { model: "m".into() },
                "model m: no agent of yours has this id (GET /v1/models lists the models)".to_string(),
            ),
            (NotFound::Secret { name: "API_TOKEN".into() }, "secret 'API_TOKEN' not found".to_string()),
        ];
        for (missing, message) in cases {
            assert_eq!(missing.to_string(), message);
        }
    }
}
