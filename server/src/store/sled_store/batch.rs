//! One commit's writes: its preconditions checked against the store as the
//! earlier commits of its group and this commit have changed it so far, and
//! the record of how to undo it. The writer applies a group's writes as one
//! sled batch.

use super::*;

/// Writes by key (`None`: deleted), in key order.
pub(super) type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Reads through the writes already made by this commit, then by the earlier
/// commits of its group (not yet applied), then the store.
pub(super) struct Overlay<'a> {
    pub(super) db: &'a sled::Db,
    pub(super) shared: &'a Shared,
    pub(super) group: &'a Writes,
    pub(super) writes: Writes,
    /// Every row read from the store (not from `writes` or `group`), as
    /// stored: the undo's originals. A row an earlier commit of the group
    /// wrote is that commit's to take back.
    pub(super) originals: Vec<IVec>,
}

impl Overlay<'_> {
    fn pending(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.writes.get(key).or_else(|| self.group.get(key))
    }
    pub(super) fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        if let Some(v) = self.pending(key) {
            return Ok(v.clone());
        }
        Ok(self.db.get(key).map_err(|e| self.shared.sled_write_error(e))?.map(|v| v.to_vec()))
    }
    pub(super) fn record(&mut self, key: &[u8]) -> StoreResult<Option<Record>> {
        if let Some(v) = self.pending(key) {
            return v.as_deref().map(decode).transpose();
        }
        let Some(raw) = self.db.get(key).map_err(|e| self.shared.sled_write_error(e))? else {
            return Ok(None);
        };
        let rec = decode(&raw)?;
        self.originals.push(raw);
        Ok(Some(rec))
    }
    /// Whether any key starting with `prefix` is there, as the group and this commit leave the store.
    pub(super) fn any_with_prefix(&self, prefix: &[u8]) -> StoreResult<bool> {
        let there = |k: &[u8]| matches!(self.pending(k), Some(Some(_)));
        for pending in [&self.writes, self.group] {
            let mut keys =
                pending.range(prefix.to_vec()..).map(|(k, _)| k).take_while(|k| k.starts_with(prefix));
            if keys.any(|k| there(k)) {
                return Ok(true);
            }
        }
        for key in self.db.scan_prefix(prefix).keys() {
            let key = key.map_err(|e| self.shared.sled_write_error(e))?;
            if self.pending(&key).is_none() {
                return Ok(true);
            }
        }
        Ok(false)
    }
    pub(super) fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }
    pub(super) fn del(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }

    pub(super) fn remove_record(&mut self, tenant: Uuid, r: &Record) {
        self.del(row_key(r.kind, tenant, r.id));
        for k in index_keys(r, tenant) {
            self.del(k);
        }
        if let Some(name) = &r.unique {
            self.del(unique_key(r.kind, tenant, r.scope, name));
        }
    }

    pub(super) fn write_record(&mut self, tenant: Uuid, r: &Record) -> StoreResult<()> {
        let bytes = serde_json::to_vec(r).map_err(io)?;
        self.put(row_key(r.kind, tenant, r.id), bytes);
        for k in index_keys(r, tenant) {
            self.put(k, Vec::new());
        }
        if let Some(name) = &r.unique {
            self.put(unique_key(r.kind, tenant, r.scope, name), r.id.as_bytes().to_vec());
        }
        Ok(())
    }
}

/// The writes of one commit after the earlier ones of its `group`, how to
/// undo it, and how many bytes it writes.
pub(super) fn build_writes(
    shared: &Shared,
    db: &sled::Db,
    group: &Writes,
    tenant: Uuid,
    ops: Vec<Op>,
    purge_step: Option<&purge::Step>,
) -> StoreResult<(Writes, Undo, u64)> {
    let mut ov = Overlay { db, shared, group, writes: Writes::new(), originals: Vec::new() };
    let mut purges_started = Vec::new();
    let mut purge_finished = None;
    if let Some(step) = purge_step {
        for id in &step.ids {
            if let Some(old) = ov.record(&row_key(step.scope.kind, tenant, *id))? {
                ov.remove_record(tenant, &old);
            }
        }
        // The purger read the store outside the writer, perhaps before the
        // group's earlier commits (records created just before their scope's
        // deletion) were applied: the scope is finished only if it is empty now.
        if step.ids.is_empty() && !ov.any_with_prefix(&purge::scope_keys(step.scope))? {
            ov.del(step.scope.marker_key());
            purge_finished = Some(step.scope);
        }
    }
    for op in ops {
        match op {
            Op::Put { record, expect } => {
                let mut rec = record;
                let old = ov.record(&row_key(rec.kind, tenant, rec.id))?;
                match (expect, &old) {
                    (Expect::Absent, Some(_)) => {
                        return Err(StoreError::IdTaken { kind: rec.kind, id: rec.id });
                    }
                    (Expect::Version(_), None) => {
                        return Err(StoreError::NotFound { kind: rec.kind, id: rec.id });
                    }
                    (Expect::Version(v), Some(o)) if o.version != v => return Err(StoreError::Stale),
                    _ => {}
                }
                if let Some(name) = &rec.unique
                    && let Some(holder) = ov.get(&unique_key(rec.kind, tenant, rec.scope, name))?
                    && holder.as_slice() != rec.id.as_bytes()
                {
                    return Err(StoreError::Duplicate { kind: rec.kind, name: name.clone() });
                }
                if let Some(o) = &old {
                    rec.version = o.version + 1;
                    ov.remove_record(tenant, o);
                } else {
                    rec.version = 0;
                }
                ov.write_record(tenant, &rec)?;
            }
            Op::Delete { kind, id, version } => {
                let Some(old) = ov.record(&row_key(kind, tenant, id))? else {
                    return Err(StoreError::NotFound { kind, id });
                };
                if version.is_some_and(|v| v != old.version) {
                    return Err(StoreError::Stale);
                }
                ov.remove_record(tenant, &old);
            }
            Op::DeleteScope { kind, scope } => {
                // Only a marker: the purger removes the records, a step at a time.
                let scope = purge::Scope { kind, tenant, scope };
                if !shared.purging.hides(scope.kind, tenant, scope.scope) && !purges_started.contains(&scope)
                {
                    ov.put(scope.marker_key(), scope.marker_value()?);
                    purges_started.push(scope);
                }
            }
            Op::Require { kind, id } => {
                if ov.get(&row_key(kind, tenant, id))?.is_none() {
                    return Err(StoreError::NotFound { kind, id });
                }
            }
            Op::Touch { kind, id } => {
                let key = row_key(kind, tenant, id);
                let Some(mut rec) = ov.record(&key)? else {
                    return Err(StoreError::NotFound { kind, id });
                };
                rec.version += 1;
                ov.put(key, serde_json::to_vec(&rec).map_err(io)?);
            }
        }
    }
    let mut written = Vec::with_capacity(ov.writes.len());
    let mut bytes = 0;
    for (k, v) in &ov.writes {
        bytes += (k.len() + v.as_ref().map_or(0, Vec::len)) as u64;
        written.push(IVec::from(k.as_slice()));
    }
    let undo = Undo { tenant, written, originals: ov.originals, purges_started, purge_finished };
    Ok((ov.writes, undo, bytes))
}

/// Applies a group's writes to `db` as one sled batch (atomic: all or none).
pub(super) fn apply_writes(shared: &Shared, db: &sled::Db, writes: Writes) -> StoreResult<()> {
    let mut batch = sled::Batch::default();
    for (k, v) in writes {
        match v {
            Some(v) => batch.insert(k, v),
            None => batch.remove(k),
        }
    }
    db.apply_batch(batch).map_err(|e| shared.sled_write_error(e))
}

// sled reads are synchronous and fast (a point read is a lookup in its page
// cache, microseconds; a page of a list is a short range scan), so the async
// reads call them directly on the async worker: handing each to
// `spawn_blocking` would cost a thread hop that is slower than the read
// itself. The one long read, `scan_kind`, runs at start, before any request.
// Only `commit` waits (for the writer thread's durable flush).
