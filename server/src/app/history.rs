//! Sessions' histories as the model sees them, cached in memory.
//!
//! A chat sends the whole history of its session to the model. Reading and
//! decoding 1,000 stored messages costs milliseconds; a chat with `save`
//! appends to the history it has just read, so the next chat would pay it
//! again. This cache keeps each recently chatted session's history in the
//! wire form with each message's token cost, and applies appends to it.
//!
//! It is exact, not eventually right. Messages change only by being appended
//! ([`App::append_messages`](super::App::append_messages)) or deleted with
//! their session; on a store only this process writes (sled admits one), both
//! go through this process's `App`, and each such write tells the cache after
//! its commit. A load
//! races with those writes safely: it registers a ticket before reading the
//! store, a write removes the entry (ticket included) when it finds a load
//! under way, and a load whose ticket is gone does not store what it read.
//! Appends are inserted in the store's order, (`created_at`, id), so two
//! concurrent appends that commit out of stamp order still read back as a
//! list would.
//!
//! On a shared store other servers append too, so a history is kept with the
//! version of its session record when it was read: every append bumps that
//! version in its commit (an [`Op::Touch`](crate::store::Op::Touch)), and a
//! chat, which reads the session anyway, uses the cached history only when the
//! version it read is the one the history is at. This process's own appends
//! move the cached version on by one; any other write makes the versions
//! differ, and the history is read again. A notification or a time to live
//! could only make staleness rarer; this check rules it out.
//!
//! Memory is bounded by [`HISTORY_CACHE_BYTES`] of message text (roughly);
//! the least recently used sessions are dropped first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Tenant;
use crate::models::tokens;
use crate::models::wire;

/// About how much message text the cache holds before it drops sessions.
pub const HISTORY_CACHE_BYTES: usize = 64 << 20;

/// One message of a history.
#[derive(Clone, Debug)]
pub struct HistoryItem {
    /// The store's order: (`created_at`, id).
    pub at: (DateTime<Utc>, Uuid),
    pub message: wire::ChatMessage,
    /// What the message costs in a prompt (as [`tokens::message_tokens`] counts).
    pub tokens: usize,
}

impl HistoryItem {
    /// `content_tokens` is the message's stored `token_count` (content and tool calls).
    pub fn new(at: (DateTime<Utc>, Uuid), message: wire::ChatMessage, content_tokens: usize) -> Self {
        let tokens =
            tokens::count_message_tokens(message.role.as_str(), "", message.name.as_deref()) + content_tokens;
        HistoryItem { at, message, tokens }
    }

    pub(in crate::app) fn bytes(&self) -> usize {
        let m = &self.message;
        let calls: usize = m
            .tool_calls
            .iter()
            .flatten()
            .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len() + 64)
            .sum();
        128 + m.content.as_ref().map_or(0, wire::Content::byte_len)
            + m.name.as_ref().map_or(0, String::len)
            + m.tool_call_id.as_ref().map_or(0, String::len)
            + calls
    }
}

pub type History = Arc<Vec<HistoryItem>>;

type Key = (Tenant, Uuid);

enum Entry {
    /// A load under way, with its ticket.
    Loading(u64),
    Ready {
        history: History,
        bytes: usize,
        used: u64,
        /// The session record's version the history is at (`None` on a store
        /// no other process writes, where this process sees every write).
        version: Option<u64>,
    },
}

/// See the module documentation.
pub struct HistoryCache {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// Ticks for tickets and recency.
    clock: u64,
    bytes: usize,
}

/// What [`HistoryCache::lookup`] found.
pub enum Lookup {
    Hit(History),
    /// Not cached: read the store, then [`HistoryCache::loaded`] with this ticket.
    Miss(u64),
}

impl Default for HistoryCache {
    fn default() -> Self {
        HistoryCache::new(HISTORY_CACHE_BYTES)
    }
}

impl HistoryCache {
    pub fn new(max_bytes: usize) -> Self {
        HistoryCache { inner: Mutex::default(), max_bytes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached history, if it is at the session's `version` (see the
    /// module's docs), or a ticket to load it with.
    pub fn lookup(&self, t: Tenant, session: Uuid, version: Option<u64>) -> Lookup {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        match inner.entries.get_mut(&(t, session)) {
            Some(Entry::Ready { history, used, version: at, .. }) if *at == version => {
                *used = now;
                Lookup::Hit(history.clone())
            }
            _ => {
                if let Some(Entry::Ready { bytes, .. }) =
                    inner.entries.insert((t, session), Entry::Loading(now))
                {
                    inner.bytes -= bytes;
                }
                Lookup::Miss(now)
            }
        }
    }

    /// Keeps a history read from the store at the session's `version` (read
    /// before the messages), unless a write came in since the ticket was given
    /// (or another load took over). Answers it either way.
    pub fn loaded(
        &self,
        t: Tenant,
        session: Uuid,
        ticket: u64,
        version: Option<u64>,
        items: Vec<HistoryItem>,
    ) -> History {
        let history = Arc::new(items);
        let bytes: usize = history.iter().map(HistoryItem::bytes).sum();
        let mut inner = self.lock();
        if matches!(inner.entries.get(&(t, session)), Some(Entry::Loading(k)) if *k == ticket) {
            if bytes > self.max_bytes {
                inner.entries.remove(&(t, session));
            } else {
                inner.clock += 1;
                let used = inner.clock;
                let ready = Entry::Ready { history: history.clone(), bytes, used, version };
                inner.entries.insert((t, session), ready);
                inner.bytes += bytes;
                self.evict(&mut inner, (t, session));
            }
        }
        history
    }

    /// Messages were appended to the session (after the commit, which bumped
    /// the session's version by one on a shared store).
    pub fn appended(&self, t: Tenant, session: Uuid, items: &[HistoryItem]) {
        let mut inner = self.lock();
        let added: usize = items.iter().map(HistoryItem::bytes).sum();
        match inner.entries.get_mut(&(t, session)) {
            None => {}
            Some(Entry::Loading(_)) => {
                inner.entries.remove(&(t, session));
            }
            Some(Entry::Ready { history, bytes, version, .. }) => {
                if let Some(v) = version {
                    *v += 1;
                }
                let list = Arc::make_mut(history);
                for item in items {
                    // Almost always at the end; before later stamps committed first.
                    let at = list.partition_point(|h| h.at <= item.at);
                    list.insert(at, item.clone());
                }
                *bytes += added;
                inner.bytes += added;
                self.evict(&mut inner, (t, session));
            }
        }
    }

    /// The session's history may have changed in a way not told: drop it.
    pub fn forget(&self, t: Tenant, session: Uuid) {
        let mut inner = self.lock();
        if let Some(Entry::Ready { bytes, .. }) = inner.entries.remove(&(t, session)) {
            inner.bytes -= bytes;
        }
    }

    /// Drops every history (changes may have been missed).
    pub fn forget_all(&self) {
        let mut inner = self.lock();
        // Loads under way must not keep what they read either: their tickets go too.
        inner.entries.clear();
        inner.bytes = 0;
    }

    /// Drops the least recently used histories (never `keep`) until under the bound.
    fn evict(&self, inner: &mut Inner, keep: Key) {
        while inner.bytes > self.max_bytes {
            let oldest = inner
                .entries
                .iter()
                .filter(|(k, _)| **k != keep)
                .filter_map(|(k, e)| match e {
                    Entry::Ready { used, .. } => Some((*used, *k)),
                    Entry::Loading(_) => None,
                })
                .min_by_key(|(used, _)| *used);
            let Some((_, key)) = oldest else { break };
            if let Some(Entry::Ready { bytes, .. }) = inner.entries.remove(&key) {
                inner.bytes -= bytes;
            }
        }
    }

    /// Sessions and bytes held (for tests and stats).
    pub fn stats(&self) -> (usize, usize) {
        let inner = self.lock();
        let ready = inner.entries.values().filter(|e| matches!(e, Entry::Ready { .. })).count();
        (ready, inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(n: i64, text: &str) -> HistoryItem {
        let at = DateTime::from_timestamp_micros(n).unwrap();
        HistoryItem::new((at, Uuid::from_u128(n as u128)), wire::ChatMessage::user(text), 1)
    }

    fn texts(h: &History) -> Vec<String> {
        h.iter().map(|i| i.message.content_text().unwrap().into_owned()).collect()
    }

    const T: Tenant = Tenant(Uuid::nil());

    #[test]
    fn a_load_then_appends_in_store_order() {
        let cache = HistoryCache::default();
        let s = Uuid::from_u128(7);
        let Lookup::Miss(ticket) = cache.lookup(T, s, None) else { panic!("empty cache hit") };
        cache.loaded(T, s, ticket, None, vec![item(1, "a")]);
        // Stamped 3 committed before stamped 2: read back as a list would be.
        cache.appended(T, s, &[item(3, "c")]);
        cache.appended(T, s, &[item(2, "b")]);
        let Lookup::Hit(h) = cache.lookup(T, s, None) else { panic!("miss after load") };
        assert_eq!(texts(&h), ["a", "b", "c"]);
        assert_eq!(h[0].tokens, tokens::count_message_tokens("user", "", None) + 1);
    }

    #[test]
    fn a_write_during_a_load_wins() {
        let cache = HistoryCache::default();
        let s = Uuid::from_u128(7);
        let Lookup::Miss(ticket) = cache.lookup(T, s, None) else { panic!() };
        // The load read the store before this append committed: it must not be kept.
        cache.appended(T, s, &[item(2, "b")]);
        let stale = cache.loaded(T, s, ticket, None, vec![item(1, "a")]);
        assert_eq!(texts(&stale), ["a"], "the loader still gets what it read");
        assert!(matches!(cache.lookup(T, s, None), Lookup::Miss(_)));
        // So must a forget, and a newer load's ticket supersedes an older one.
        let Lookup::Miss(old) = cache.lookup(T, s, None) else { panic!() };
        let Lookup::Miss(new) = cache.lookup(T, s, None) else { panic!() };
        cache.loaded(T, s, old, None, vec![item(1, "old")]);
        assert!(matches!(cache.lookup(T, s, None), Lookup::Miss(_)));
        let Lookup::Miss(t2) = cache.lookup(T, s, None) else { panic!() };
        assert_ne!(t2, new);
        cache.forget(T, s);
        cache.loaded(T, s, t2, None, vec![item(1, "a")]);
        assert!(matches!(cache.lookup(T, s, None), Lookup::Miss(_)));
    }

    #[test]
    fn on_a_shared_store_a_history_serves_only_the_session_version_it_is_at() {
        let cache = HistoryCache::default();
        let s = Uuid::from_u128(7);
        let Lookup::Miss(ticket) = cache.lookup(T, s, Some(3)) else { panic!() };
        cache.loaded(T, s, ticket, Some(3), vec![item(1, "a")]);
        assert!(matches!(cache.lookup(T, s, Some(3)), Lookup::Hit(_)));
        // This process's append moved the session to version 4.
        cache.appended(T, s, &[item(2, "b")]);
        let Lookup::Hit(h) = cache.lookup(T, s, Some(4)) else { panic!("own append keeps the history") };
        assert_eq!(texts(&h), ["a", "b"]);
        // Another server appended too (version 6, not 5): read again, and the memory is freed.
        assert!(matches!(cache.lookup(T, s, Some(6)), Lookup::Miss(_)));
        assert_eq!(cache.stats(), (0, 0));
        cache.forget_all();
        assert!(matches!(cache.lookup(T, s, Some(6)), Lookup::Miss(_)));
    }

    #[test]
    fn tenants_are_apart_and_memory_is_bounded() {
        let one = item(1, "x").bytes();
        let cache = HistoryCache::new(one * 2);
        let other = Tenant(Uuid::from_u128(1));
        for (i, t) in [(1, T), (2, other), (3, T)] {
            let s = Uuid::from_u128(i);
            let Lookup::Miss(k) = cache.lookup(t, s, None) else { panic!() };
            cache.loaded(t, s, k, None, vec![item(i as i64, "x")]);
        }
        // Three histories of one message each, room for two: the oldest went.
        assert_eq!(cache.stats(), (2, one * 2));
        assert!(matches!(cache.lookup(T, Uuid::from_u128(1), None), Lookup::Miss(_)));
        assert!(matches!(cache.lookup(other, Uuid::from_u128(2), None), Lookup::Hit(_)));
        assert!(matches!(cache.lookup(T, Uuid::from_u128(2), None), Lookup::Miss(_)));
    }
}
