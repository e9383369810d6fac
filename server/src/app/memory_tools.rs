//! The built-in memory tools the server runs for the model: `memory_insert`,
//! `memory_replace` and `memory_rethink` (edits of memory blocks, by label),
//! and `conversation_search` (past messages).
//!
//! A tool's answer is what the model reads: the block as it now is, or
//! why nothing changed (no block of that label, a read-only block, an edit
//! past the block's limit, a passage that is not in the block exactly once),
//! worded so that the model can correct its call.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::memory::{BlockData, Provenance, StoredEditOp, StoredEditStatus, edit_record};
use super::records::{RETRIES, decode, decode_data, encode};
use super::{App, Tenant};
use crate::api::types::{Block, Message, Role};
use crate::search::tokenize;
use crate::store::{Direction, Expect, Kind, ListQuery, Op, StoreError, now};

/// An edit the model asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryEdit {
    /// `memory_insert {label, new_str, insert_line?}`: text added after a line (default: at the end).
    Insert,
    /// `memory_replace {label, old_str, new_str}`: a passage that occurs once, replaced.
    Replace,
    /// `memory_rethink {label, new_memory}`: the whole value rewritten.
    Rethink,
}

impl MemoryEdit {
    pub const ALL: [MemoryEdit; 3] = [MemoryEdit::Insert, MemoryEdit::Replace, MemoryEdit::Rethink];

    /// The edit a function of this name makes.
    pub fn named(name: &str) -> Option<MemoryEdit> {
        MemoryEdit::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The function's name, as the model calls it.
    pub fn name(self) -> &'static str {
        match self {
            MemoryEdit::Insert => "memory_insert",
            MemoryEdit::Replace => "memory_replace",
            MemoryEdit::Rethink => "memory_rethink",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            MemoryEdit::Insert => {
                "Inserts text into one of your memory blocks (by its label), after the given line \
                 (0: at the start; omitted or -1: at the end). Memory blocks stay in view in every \
                 later conversation: keep there what you must remember."
            }
            MemoryEdit::Replace => {
                "Replaces a passage of one of your memory blocks (by its label) with new text. The \
                 passage must occur in the block exactly once, as written there; an empty new_str \
                 deletes it."
            }
            MemoryEdit::Rethink => {
                "Rewrites one of your memory blocks (by its label) whole: to reorganise it, or to \
                 make it shorter when it is near its limit."
            }
        }
    }

    pub fn parameters(self) -> Value {
        let label = json!({"type": "string", "description": "The label of the memory block."});
        match self {
            MemoryEdit::Insert => json!({
                "type": "object",
                "properties": {
                    "label": label,
                    "new_str": {"type": "string", "description": "The text to insert."},
                    "insert_line": {"type": "integer", "description": "The line after which to insert (0: the start; -1: the end)."},
                },
                "required": ["label", "new_str"],
            }),
            MemoryEdit::Replace => json!({
                "type": "object",
                "properties": {
                    "label": label,
                    "old_str": {"type": "string", "description": "The passage to replace, exactly as it is in the block."},
                    "new_str": {"type": "string", "description": "The text to put in its place."},
                },
                "required": ["label", "old_str", "new_str"],
            }),
            MemoryEdit::Rethink => json!({
                "type": "object",
                "properties": {
                    "label": label,
                    "new_memory": {"type": "string", "description": "The block's new value, whole."},
                },
                "required": ["label", "new_memory"],
            }),
        }
    }

    pub(crate) fn op(self) -> StoredEditOp {
        match self {
            MemoryEdit::Insert => StoredEditOp::Insert,
            MemoryEdit::Replace => StoredEditOp::Replace,
            MemoryEdit::Rethink => StoredEditOp::Rethink,
        }
    }

    /// The new value of `value` after this edit with `args`, or why there is none.
    pub(crate) fn apply(self, value: &str, label: &str, args: &Map<String, Value>) -> Result<String, String> {
        let text = |key: &str| -> Result<String, String> {
            match args.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                None | Some(Value::Null) => Err(format!("{} needs `{key}`", self.name())),
                Some(other) => Err(format!("{} needs `{key}` as a string, not {other}", self.name())),
            }
        };
        match self {
            MemoryEdit::Insert => {
                let new = text("new_str")?;
                let line = match args.get("insert_line") {
                    None | Some(Value::Null) => -1,
                    Some(v) => {
                        v.as_i64().ok_or_else(|| format!("insert_line must be an integer, not {v}"))?
                    }
                };
                if value.is_empty() {
                    return Ok(new);
                }
                let mut lines: Vec<&str> = value.split('\n').collect();
                let at = if line < 0 { lines.len() } else { (line as usize).min(lines.len()) };
                lines.insert(at, &new);
                Ok(lines.join("\n"))
            }
            MemoryEdit::Replace => {
                let old = text("old_str")?;
                let new = text("new_str")?;
                if old.is_empty() {
                    return Err("old_str is empty: give the passage to replace, as it is in the block".into());
                }
                match value.matches(old.as_str()).count() {
                    0 => Err(format!(
                        "{old:?} does not occur in the memory block {label:?}: copy the passage exactly as \
                         it is in the block"
                    )),
                    1 => Ok(value.replacen(old.as_str(), &new, 1)),
                    n => Err(format!(
                        "{old:?} occurs {n} times in the memory block {label:?}: include more of the text \
                         around it, so that it occurs once"
                    )),
                }
            }
            MemoryEdit::Rethink => text("new_memory"),
        }
    }
}

/// Whose memory a turn's memory tools reach, and whom their edits name.
#[derive(Clone, Debug, Default)]
pub struct MemoryScope {
    /// The agent of the turn: its blocks come first.
    pub agent: Option<Uuid>,
    /// The users of the session: their blocks after the agent's.
    pub users: Vec<Uuid>,
    /// The session of the turn (none for a task's step).
    pub session: Option<Uuid>,
    /// The execution of a task's step.
    pub execution: Option<Uuid>,
}

impl MemoryScope {
    fn owners(&self) -> impl Iterator<Item = Uuid> + '_ {
        self.agent.iter().copied().chain(self.users.iter().copied())
    }
}

/// The most sessions `conversation_search` reads (the newest).
pub const SEARCH_SESSIONS: usize = 50;
/// The most messages it reads of one session (its newest).
pub const SEARCH_MESSAGES_PER_SESSION: usize = 2000;
/// The most results it answers.
pub const SEARCH_MAX_RESULTS: usize = 20;

impl App {
    /// Runs a memory edit the model called: on the first block of that label
    /// among the scope's owners' (the agent's, then the users'), recorded as
    /// an edit made by `call` in `message` of the scope's session.
    pub async fn memory_tool(
        &self,
        t: Tenant,
        scope: &MemoryScope,
        edit: MemoryEdit,
        args: &Map<String, Value>,
        call: &str,
        message: Option<Uuid>,
    ) -> Result<String, String> {
        let label = match args.get("label") {
            Some(Value::String(l)) if !l.is_empty() => l.clone(),
            _ => return Err(format!("{} needs `label`: the label of the memory block to edit", edit.name())),
        };
        let block = self.block_labelled(t, scope, &label).await?;
        let source = Provenance {
            agent_id: scope.agent,
            session_id: scope.session,
            message_id: message,
            tool_call_id: Some(call.to_owned()),
            request_id: None,
            execution_id: scope.execution,
            learning_job_id: None,
        };
        let _queue = self.lock_record(t, Kind::Block, block).await;
        for _ in 0..RETRIES {
            let Some(mut rec) = self.store.get(t.0, Kind::Block, block).await.map_err(|e| e.to_string())?
            else {
                return Err(format!("the memory block {label:?} was deleted meanwhile"));
            };
            let mut data: BlockData = decode_data::<Block>(&rec).map_err(|e| e.to_string())?;
            if data.read_only {
                return Err(format!(
                    "the memory block {label:?} is read-only: you cannot edit it (tell the user if it is wrong)"
                ));
            }
            let value = edit.apply(&data.value, &label, args)?;
            let chars = value.chars().count() as i64;
            if chars > data.limit {
                return Err(format!(
                    "the edit would make the memory block {label:?} {chars} characters long, over its limit of {}: \
                     make it shorter (memory_rethink rewrites it whole)",
                    data.limit
                ));
            }
            if value == data.value {
                return Ok(format!("The memory block {label:?} is unchanged. It reads:\n{value}"));
            }
            let expect = Expect::Version(rec.version);
            let version = rec.version + 1;
            let before = std::mem::replace(&mut data.value, value.clone());
            let edit_rec = edit_record(
                block,
                edit.op(),
                before,
                value.clone(),
                version,
                source.clone(),
                StoredEditStatus::Applied,
            )
            .map_err(|e| e.to_string())?;
            rec.data = encode(&data).map_err(|e| e.to_string())?;
            rec.updated_at = now().max(rec.created_at);
            let ops =
                vec![Op::Put { record: rec, expect }, Op::Put { record: edit_rec, expect: Expect::Absent }];
            match self.store.commit(t.0, ops).await {
                Ok(()) => {
                    return Ok(format!(
                        "The memory block {label:?} was edited (version {version}, {chars} of {} characters). It now reads:\n{value}",
                        data.limit
                    ));
                }
                Err(StoreError::Stale) => continue,
                Err(e) => return Err(format!("the edit could not be saved: {e}")),
            }
        }
        Err("the memory block kept changing under this edit: try again".into())
    }

    /// The id of the first block labelled `label` among the scope's owners'.
    async fn block_labelled(&self, t: Tenant, scope: &MemoryScope, label: &str) -> Result<Uuid, String> {
        let mut labels = Vec::new();
        for owner in scope.owners() {
            let blocks = self.blocks_of(t, owner).await.map_err(|e| e.to_string())?;
            if let Some(b) = blocks.iter().find(|b| b.label == label) {
                return Ok(b.id);
            }
            labels.extend(blocks.into_iter().map(|b| b.label));
        }
        Err(if labels.is_empty() {
            format!("there is no memory block labelled {label:?}: there are no memory blocks here")
        } else {
            format!("there is no memory block labelled {label:?}; the blocks are: {}", labels.join(", "))
        })
    }

    /// Searches past messages for `conversation_search`: those of the
    /// scope's session and of the other sessions of its users (the newest
    /// [`SEARCH_SESSIONS`], each its newest [`SEARCH_MESSAGES_PER_SESSION`]),
    /// ranked by BM25 over the search index's terms (case, accents and
    /// English stems folded); filters `roles`, `start_date`, `end_date`.
    pub async fn conversation_search(
        &self,
        t: Tenant,
        scope: &MemoryScope,
        args: &Map<String, Value>,
    ) -> Result<String, String> {
        let Some(query) = args.get("query").and_then(Value::as_str).filter(|q| !q.trim().is_empty()) else {
            return Err("conversation_search needs a `query`: the words to look for".into());
        };
        let roles: Option<Vec<Role>> =
            match args.get("roles") {
                None | Some(Value::Null) => None,
                Some(v) => Some(serde_json::from_value(v.clone()).map_err(|_| {
                    format!("roles must be a list of user, assistant, system or tool, not {v}")
                })?),
            };
        let start = date_arg(args, "start_date", false)?;
        let end = date_arg(args, "end_date", true)?;
        let limit = match args.get("limit") {
            None | Some(Value::Null) => 5,
            Some(v) => {
                v.as_u64().ok_or_else(|| format!("limit must be a positive integer, not {v}"))? as usize
            }
        }
        .clamp(1, SEARCH_MAX_RESULTS);

        let mut sessions: Vec<Uuid> = scope.session.into_iter().collect();
        for user in &scope.users {
            let mut of_user =
                self.store.referencing(t.0, Kind::Session, *user).await.map_err(|e| e.to_string())?;
            of_user.sort_unstable_by(|a, b| b.cmp(a));
            sessions.extend(of_user);
        }
        let mut seen = std::collections::HashSet::new();
        sessions.retain(|s| seen.insert(*s));
        sessions.truncate(SEARCH_SESSIONS);

        let mut q = ListQuery::oldest_first(0, SEARCH_MESSAGES_PER_SESSION);
        q.direction = Direction::Desc;
        let mut messages: Vec<Message> = Vec::new();
        for session in sessions {
            let recs = match self.store.list(t.0, Kind::Message, session, &q).await {
                Ok(recs) => recs,
                Err(e) => return Err(format!("conversation_search failed: {e}")),
            };
            messages.extend(recs.iter().filter_map(|r| decode::<Message>(r).ok()).filter(|m| {
                roles.as_ref().is_none_or(|rs| rs.contains(&m.role))
                    && start.is_none_or(|s| m.created_at >= s)
                    && end.is_none_or(|e| m.created_at < e)
                    && !m.content.is_empty()
            }));
        }
        let found = bm25(query, &messages, limit);
        let results: Vec<Value> = found
            .into_iter()
            .map(|(i, score)| {
                let m = &messages[i];
                json!({
                    "session_id": m.session_id, "message_id": m.id, "role": m.role,
                    "created_at": m.created_at, "content": m.content, "score": score,
                })
            })
            .collect();
        Ok(Value::Array(results).to_string())
    }
}

/// A date (`2026-11-29`) or a time (RFC 3339) argument; a date ends at its
/// day's end when it is an `end`.
fn date_arg(args: &Map<String, Value>, key: &str, end: bool) -> Result<Option<DateTime<Utc>>, String> {
    let Some(v) = args.get(key).filter(|v| !v.is_null()) else { return Ok(None) };
    let s = v
        .as_str()
        .ok_or_else(|| format!("{key} must be a date (YYYY-MM-DD) or a time (RFC 3339), not {v}"))?;
    if let Ok(at) = DateTime::parse_from_rfc3339(s) {
        return Ok(Some(at.with_timezone(&Utc)));
    }
    let day = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| format!("{key} must be a date (YYYY-MM-DD) or a time (RFC 3339), not {s:?}"))?;
    let day = if end { day.succ_opt().unwrap_or(day) } else { day };
    Ok(Some(day.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc()))
}

/// The best `limit` of `messages` for `query` by BM25 (k1 1.2, b 0.75), as
/// (index, score), best first; messages that share no term are left out.
fn bm25(query: &str, messages: &[Message], limit: usize) -> Vec<(usize, f64)> {
    let mut terms = tokenize(query);
    terms.sort();
    terms.dedup();
    if terms.is_empty() || messages.is_empty() {
        return Vec::new();
    }
    let docs: Vec<Vec<String>> = messages.iter().map(|m| tokenize(&m.content)).collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n;
    let mut df: HashMap<&str, usize> = HashMap::new();
    for doc in &docs {
        let mut present: Vec<&str> =
            doc.iter().map(String::as_str).filter(|w| terms.iter().any(|t| t == w)).collect();
        present.sort_unstable();
        present.dedup();
        for w in present {
            *df.entry(w).or_default() += 1;
        }
    }
    let (k1, b) = (1.2, 0.75);
    let mut scored: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .filter_map(|(i, doc)| {
            let len = doc.len() as f64;
            let score: f64 = terms
                .iter()
                .filter_map(|term| {
                    let tf = doc.iter().filter(|w| *w == term).count() as f64;
                    let df = *df.get(term.as_str())? as f64;
                    (tf > 0.0).then(|| {
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len / avg.max(1.0)))
                    })
                })
                .sum();
            (score > 0.0).then_some((i, score))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(messages[b.0].created_at.cmp(&messages[a.0].created_at)));
    scored.truncate(limit);
    scored
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::MemoryEdit;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn edits_apply_as_the_model_asks_or_say_why_not() {
        let value = "Name: Ann\nLikes: tea";
        let insert = MemoryEdit::Insert.apply(value, "human", &args(json!({"new_str": "Lives in Oslo"})));
        assert_eq!(insert.unwrap(), "Name: Ann\nLikes: tea\nLives in Oslo");
        let first =
            MemoryEdit::Insert.apply(value, "human", &args(json!({"new_str": "User", "insert_line": 0})));
        assert_eq!(first.unwrap(), "User\nName: Ann\nLikes: tea");
        let replaced =
            MemoryEdit::Replace.apply(value, "human", &args(json!({"old_str": "tea", "new_str": "coffee"})));
        assert_eq!(replaced.unwrap(), "Name: Ann\nLikes: coffee");
        let missing =
            MemoryEdit::Replace.apply(value, "human", &args(json!({"old_str": "milk", "new_str": "x"})));
        assert!(missing.unwrap_err().contains("does not occur"));
        let twice = MemoryEdit::Replace.apply("a a", "human", &args(json!({"old_str": "a", "new_str": "b"})));
        assert!(twice.unwrap_err().contains("occurs 2 times"));
        let rethink = MemoryEdit::Rethink.apply(value, "human", &args(json!({"new_memory": "Ann"})));
        assert_eq!(rethink.unwrap(), "Ann");
        let no_arg = MemoryEdit::Rethink.apply(value, "human", &args(json!({})));
        assert!(no_arg.unwrap_err().contains("new_memory"));
    }
}
