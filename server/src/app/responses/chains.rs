//! What a WebSocket connection remembers of the responses it made with
//! `store: false`, so that a later response on the same connection can
//! continue one by its `previous_response_id` (the Open Responses WebSocket
//! mode's connection-local cache). Nothing of it reaches the store; it goes
//! with the connection.
//!
//! Bounded: the latest [`MAX_CHAINS`] responses, and at most
//! [`MAX_CHAIN_BYTES`] of message text in all (the oldest go first). A
//! continuation that fails forgets the response it continued.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use super::super::history::{History, HistoryItem};
use crate::api::types::Session;

/// How many responses a connection remembers.
pub const MAX_CHAINS: usize = 16;
/// About how much message text a connection remembers, in all.
pub const MAX_CHAIN_BYTES: usize = 32 << 20;

/// The conversation after a response that was not stored: what a response
/// continuing it starts from.
#[derive(Clone)]
pub struct Chain {
    /// The session it is a turn of: a stored one it continued, or the new
    /// one it would have made (never created).
    pub session: Session,
    /// Every message of the conversation, oldest first, as the model sees them.
    pub history: History,
}

impl Chain {
    /// This chain with `made` (a response's input and answer) after its history.
    pub fn then(session: Session, history: &History, made: Vec<HistoryItem>) -> Chain {
        let mut all = Vec::with_capacity(history.len() + made.len());
        all.extend(history.iter().cloned());
        all.extend(made);
        Chain { session, history: Arc::new(all) }
    }

    fn bytes(&self) -> usize {
        self.history.iter().map(HistoryItem::bytes).sum()
    }
}

/// One connection's memory (see the module's docs); shared by the connection
/// and the response under way.
#[derive(Clone, Default)]
pub struct Chains {
    inner: Arc<Mutex<Entries>>,
}

#[derive(Default)]
struct Entries {
    /// Oldest first.
    list: VecDeque<(Uuid, Chain, usize)>,
    bytes: usize,
}

impl Chains {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chain of the response `id`, when remembered.
    pub fn get(&self, id: Uuid) -> Option<Chain> {
        self.lock().list.iter().find(|(k, _, _)| *k == id).map(|(_, chain, _)| chain.clone())
    }

    /// Remembers the chain of the response `id`, forgetting the oldest beyond the bounds.
    pub fn insert(&self, id: Uuid, chain: Chain) {
        let size = chain.bytes();
        if size > MAX_CHAIN_BYTES {
            // One conversation larger than the whole bound: not remembered.
            return;
        }
        let mut entries = self.lock();
        entries.list.push_back((id, chain, size));
        entries.bytes += size;
        while entries.list.len() > MAX_CHAINS || entries.bytes > MAX_CHAIN_BYTES {
            if let Some((_, _, size)) = entries.list.pop_front() {
                entries.bytes -= size;
            }
        }
    }

    /// Forgets the response `id`.
    pub fn forget(&self, id: Uuid) {
        let mut entries = self.lock();
        if let Some(at) = entries.list.iter().position(|(k, _, _)| *k == id) {
            let (_, _, size) = entries.list.remove(at).expect("the position is in the list");
            entries.bytes -= size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::wire;

    fn chain(text: &str) -> Chain {
        let (record, _) =
            crate::app::sessions::session_record(crate::app::sessions::plain_session(None, None))
                .expect("a session record");
        let session = crate::app::records::decode(&record).expect("a session");
        let item = HistoryItem::new((chrono::Utc::now(), Uuid::now_v7()), wire::ChatMessage::user(text), 1);
        Chain::then(session, &History::default(), vec![item])
    }

    #[test]
    fn keeps_the_latest_chains_and_forgets_on_demand() {
        let chains = Chains::default();
        let ids: Vec<Uuid> = (0..MAX_CHAINS + 2).map(|_| Uuid::now_v7()).collect();
        for id in &ids {
            chains.insert(*id, chain("x"));
        }
        assert!(chains.get(ids[0]).is_none() && chains.get(ids[1]).is_none(), "the oldest went first");
        assert!(chains.get(ids[2]).is_some());
        let last = *ids.last().unwrap();
        assert_eq!(chains.get(last).unwrap().history.len(), 1);
        chains.forget(last);
        assert!(chains.get(last).is_none());
    }

    #[test]
    fn a_conversation_over_the_byte_bound_is_not_kept() {
        let chains = Chains::default();
        let small = Uuid::now_v7();
        chains.insert(small, chain("x"));
        let huge = Uuid::now_v7();
        chains.insert(huge, chain(&"y".repeat(MAX_CHAIN_BYTES + 1)));
        assert!(chains.get(huge).is_none());
        assert!(chains.get(small).is_some(), "the others stay");
    }
}
