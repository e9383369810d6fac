//! Compacting a conversation (`POST /v1/responses/compact`): the window (a
//! stored response's conversation, then the request's input) summarised by
//! the model into one sealed `compaction` item (see [`crate::app::compaction`]),
//! after the window's user messages as they were. Nothing is stored: the
//! client starts a new chain with the answer's `output` as its input.

use uuid::Uuid;

use super::super::compaction::{COMPACTION_PROMPT, Sealed, seal};
use super::super::turn::convert::new_message;
use super::{App, Error, ResponseData, Result, Tenant, response_id};
use crate::api::types::{
    CompactResponseRequest, CompactedItem, CompactedResponse, ItemContent, ResponseUsage,
};
use crate::models::wire;
use crate::store::Kind;

/// The longest summary a compaction asks the model for, in tokens.
pub const COMPACTION_MAX_TOKENS: usize = 4096;

impl App {
    /// Compacts the request's window (see the module's docs).
    pub async fn response_compact(
        &self,
        t: Tenant,
        req: CompactResponseRequest,
    ) -> Result<CompactedResponse> {
        let asked = req.model.clone().unwrap_or_default();
        let agent = self.completion_agent(t, &asked).await?;
        let (provider, model) = match &agent {
            Some(agent) => self.choose_model(None, agent)?,
            None => (self.models.resolve(&asked)?.clone(), asked),
        };
        let mut window: Vec<wire::ChatMessage> = Vec::new();
        if let Some(previous) = &req.previous_response_id {
            window.extend(self.stored_conversation(t, previous).await?);
        }
        let new = self.input_messages(req.input)?;
        window.extend(new.iter().map(new_message));
        let how = match &req.instructions {
            Some(instructions) => format!("{COMPACTION_PROMPT}\n\n{instructions}"),
            None => COMPACTION_PROMPT.to_owned(),
        };
        let (summary, usage) =
            self.summarise(&provider, &model, &how, &window, COMPACTION_MAX_TOKENS).await?;
        let created_at = crate::store::now().timestamp();
        let mut output: Vec<CompactedItem> = window
            .iter()
            .filter(|m| m.role == wire::Role::User)
            .map(|m| CompactedItem::Message {
                id: crate::app::conversations::message_item_id(Uuid::now_v7()),
                status: "completed".into(),
                role: "user".into(),
                content: vec![ItemContent::InputText {
                    text: m.content_text().unwrap_or_default().into_owned(),
                }],
            })
            .collect();
        output.push(CompactedItem::Compaction {
            id: format!("cmp_{}", Uuid::now_v7().simple()),
            encrypted_content: seal(&Sealed { summary, model, created_at }),
        });
        Ok(CompactedResponse {
            id: response_id(Uuid::now_v7()),
            object: "response.compaction".into(),
            created_at,
            output,
            usage: ResponseUsage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                total_tokens: usage.total_tokens,
                ..ResponseUsage::default()
            },
        })
    }

    /// The conversation of a stored response, as the model saw it: its
    /// session's messages up to and including its answer.
    async fn stored_conversation(&self, t: Tenant, id: &str) -> Result<Vec<wire::ChatMessage>> {
        let rec = self.response_record(t, id).await.map_err(|e| match e {
            Error::NotFound(m) => Error::NotFound(m.in_field("previous_response_id")),
            e => e,
        })?;
        let data: ResponseData = serde_json::from_value(rec.data.clone())
            .map_err(|e| Error::Internal(format!("response {id} does not decode: {e}")))?;
        let session = self.load(t, Kind::Session, rec.scope).await?;
        let history = self.history(t, rec.scope, self.store.shared().then_some(session.version)).await?;
        let end = history.iter().position(|h| h.at.1 == data.output_message).map_or(history.len(), |i| i + 1);
        Ok(history[..end].iter().map(|h| h.message.clone()).collect())
    }
}
