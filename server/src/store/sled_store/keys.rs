//! The key layout (see the table in the parent module): how a record's row and
//! its index keys are spelled, so that every scan stays within one tenant.

use super::*;

pub(super) fn row_key(kind: Kind, tenant: Uuid, id: Uuid) -> Vec<u8> {
    let mut k = Vec::with_capacity(34);
    k.push(b'r');
    k.push(kind as u8);
    k.extend_from_slice(tenant.as_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

pub(super) fn scope_prefix(tag: u8, kind: Kind, tenant: Uuid, scope: Uuid) -> Vec<u8> {
    let mut k = Vec::with_capacity(80);
    k.push(tag);
    k.push(kind as u8);
    k.extend_from_slice(tenant.as_bytes());
    k.extend_from_slice(scope.as_bytes());
    k
}

pub(super) fn sort_byte(s: SortBy) -> u8 {
    match s {
        SortBy::CreatedAt => b'c',
        SortBy::UpdatedAt => b'u',
    }
}

/// A key of an order index: its prefix, then the time (offset so that any
/// representable time sorts correctly as unsigned), then the id. Also where a
/// list after that position starts.
pub(super) fn positioned(mut prefix: Vec<u8>, at: chrono::DateTime<chrono::Utc>, id: Uuid) -> Vec<u8> {
    prefix.extend_from_slice(&((at.timestamp_micros() as u64) ^ (1 << 63)).to_be_bytes());
    prefix.extend_from_slice(id.as_bytes());
    prefix
}

pub(super) fn order_key(r: &Record, tenant: Uuid, s: SortBy) -> Vec<u8> {
    let mut k = scope_prefix(b'o', r.kind, tenant, r.scope);
    k.push(sort_byte(s));
    positioned(k, r.sort_time(s), r.id)
}

/// A stable hash of one metadata `key = value` pair: values equal as a filter
/// compares them ([`crate::metadata::values_equal`]) hash alike, so `{"n": 1}` finds a
/// record stored with `{"n": 1.0}`.
pub(super) fn meta_hash(key: &str, value: &Value) -> [u8; 8] {
    let mut text = Vec::with_capacity(key.len() + 16);
    text.extend_from_slice(key.as_bytes());
    text.push(0);
    canonical(value, &mut text);
    hash_prefix(&text)
}

/// The first 8 bytes of the SHA-256 of `bytes`.
pub(super) fn hash_prefix(bytes: &[u8]) -> [u8; 8] {
    let d = Sha256::digest(bytes);
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// The keys of one metadata pair's index, up to the sort; `hash` is its [`meta_hash`].
pub(super) fn meta_prefix(kind: Kind, tenant: Uuid, scope: Uuid, hash: [u8; 8], s: SortBy) -> Vec<u8> {
    let mut k = scope_prefix(b'm', kind, tenant, scope);
    k.extend_from_slice(&hash);
    k.push(sort_byte(s));
    k
}

pub(super) fn meta_key(r: &Record, tenant: Uuid, hash: [u8; 8], s: SortBy) -> Vec<u8> {
    positioned(meta_prefix(r.kind, tenant, r.scope, hash, s), r.sort_time(s), r.id)
}

pub(super) fn ref_prefix(kind: Kind, tenant: Uuid, target: Uuid) -> Vec<u8> {
    scope_prefix(b'f', kind, tenant, target)
}

pub(super) fn unique_key(kind: Kind, tenant: Uuid, scope: Uuid, name: &str) -> Vec<u8> {
    let mut k = scope_prefix(b'u', kind, tenant, scope);
    k.extend_from_slice(name.as_bytes());
    k
}

pub(super) fn id_suffix(key: &[u8]) -> Uuid {
    let mut b = [0u8; 16];
    b.copy_from_slice(&key[key.len() - 16..]);
    Uuid::from_bytes(b)
}

/// Every index key a record owns (not its row).
pub(super) fn index_keys(r: &Record, tenant: Uuid) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for s in SORTS {
        keys.push(order_key(r, tenant, s));
        if let Some(m) = &r.metadata {
            for (k, v) in m {
                keys.push(meta_key(r, tenant, meta_hash(k, v), s));
            }
        }
    }
    for target in &r.refs {
        let mut k = ref_prefix(r.kind, tenant, *target);
        k.extend_from_slice(r.id.as_bytes());
        keys.push(k);
    }
    keys
}

/// The end (exclusive) of the keys that start with `prefix`.
pub(super) fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}
