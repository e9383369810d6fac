//! Upgrading a store written in an earlier format to this one: at open,
//! before the writer starts and before anything is served.
//!
//! Format 1 to 2 (the metadata index). Format 1 hashed a metadata value's
//! JSON text as stored, so a record stored with `{"n": 1.0}` sat under another
//! index key than the one a filter `{"n": 1}` looks under. Format 2 hashes the
//! canonical form ([`crate::metadata::canonical`]), which differs from
//! the text only for floats that are integers (`1.0`, `-0.0`, `1e3`). The
//! upgrade reads every record once and, for each metadata pair whose hash
//! changed, replaces its index keys (one per sort order); records without
//! such a float are only read.
//!
//! Bounded in memory: the records are read in key order, and the key changes
//! are applied in sled batches of at most [`BATCH_KEYS`] keys, each read
//! resuming after the last record of the batch before. Crash-safe: a batch is
//! atomic and idempotent (removing a key already gone and inserting one
//! already there change nothing), and the manifest says the upgrade is under
//! way (`upgrading_from`) from before the first batch until a flush made
//! every batch durable, so an upgrade cut short runs again from the start on
//! the next open. The manifest names the new format from the start, so an
//! older binary refuses the store even while it is half upgraded.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;
use uuid::Uuid;

use super::{SORTS, decode, hash_prefix, meta_hash, meta_key};
use crate::store::manifest::{FORMAT_VERSION, running_manifest};
use crate::store::open::{OpenError, Opened, quietly, sled_error, write_manifest};

/// How many index keys (removed plus inserted) one batch changes at most.
const BATCH_KEYS: usize = 4096;

/// Row keys start with this tag ([`super::row_key`]).
const ROW_TAG: u8 = b'r';

/// Brings the store just opened to [`FORMAT_VERSION`], then says so in its
/// manifest; does nothing when it is there.
pub(super) fn to_current(
    db: &sled::Db,
    dir: &Path,
    opened: &Opened,
    accepting: bool,
) -> Result<(), OpenError> {
    if opened.format_version >= FORMAT_VERSION {
        return Ok(());
    }
    quietly(|| rehash_metadata_index(db, dir))
        .map_err(|what| OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting })?
        .map_err(|e| sled_error(dir, e, accepting))?;
    write_manifest(dir, &running_manifest(opened.store_id, opened.sequence))
}

/// Format 1 to 2: moves every metadata index key whose hash changed, and
/// makes that durable. Tells the operator on stderr when the store has records.
fn rehash_metadata_index(db: &sled::Db, dir: &Path) -> sled::Result<()> {
    let started = Instant::now();
    let has_records = db.scan_prefix([ROW_TAG]).next().transpose()?.is_some();
    if has_records {
        eprintln!(
            "upgrading the store in {} to format {FORMAT_VERSION} (its metadata index); \
             this reads every record once, and an interrupted upgrade resumes at the next start",
            dir.display()
        );
    }
    let mut from = vec![ROW_TAG];
    let mut total = Progress::default();
    loop {
        let (progress, next) = rehash_batch(db, &from, BATCH_KEYS)?;
        total.records += progress.records;
        total.moved += progress.moved;
        total.unreadable += progress.unreadable;
        match next {
            Some(next) => from = next,
            None => break,
        }
    }
    db.flush()?;
    if has_records {
        eprintln!(
            "upgraded the store in {:.1} s: {} records read, {} metadata index keys moved{}",
            started.elapsed().as_secs_f64(),
            total.records,
            total.moved,
            match total.unreadable {
                0 => String::new(),
                n => format!(
                    "; {n} records do not decode (reading them answers an error) and were left as they are"
                ),
            }
        );
    }
    Ok(())
}

#[derive(Debug, Default, PartialEq)]
struct Progress {
    /// Records read.
    records: u64,
    /// Index keys replaced (each is one removed and one inserted).
    moved: u64,
    /// Rows that do not decode, left as they are.
    unreadable: u64,
}

/// Reads records from row key `from` on until `max_keys` index keys are to
/// change, and applies those changes as one batch. Answers how far it got and
/// the key to resume from (`None`: every record was read).
fn rehash_batch(db: &sled::Db, from: &[u8], max_keys: usize) -> sled::Result<(Progress, Option<Vec<u8>>)> {
    let (mut removed, mut inserted) = (Vec::new(), Vec::new());
    let mut progress = Progress::default();
    let mut next = None;
    for kv in db.range(from..) {
        let (key, raw) = kv?;
        if key.first() != Some(&ROW_TAG) {
            break;
        }
        progress.records += 1;
        // Most records (messages) have no metadata: skip them without decoding.
        // Records are stored as compact JSON, so one with metadata holds this text.
        if !raw.windows(METADATA_OBJECT.len()).any(|w| w == METADATA_OBJECT) {
            continue;
        }
        // A row that does not decode cannot be listed either (reading it
        // answers an error today): its keys are left as they are.
        let tenant = key.get(2..18).and_then(|t| Uuid::from_slice(t).ok());
        let (Ok(record), Some(tenant)) = (decode(&raw), tenant) else {
            progress.unreadable += 1;
            continue;
        };
        for (name, value) in record.metadata.iter().flatten() {
            let (old, new) = (format1_meta_hash(name, value), meta_hash(name, value));
            if old == new {
                continue;
            }
            for s in SORTS {
                removed.push(meta_key(&record, tenant, old, s));
                inserted.push(meta_key(&record, tenant, new, s));
                progress.moved += 1;
            }
        }
        if removed.len() + inserted.len() >= max_keys {
            let mut after = key.to_vec();
            after.push(0);
            next = Some(after);
            break;
        }
    }
    // Inserts after removes: in a sled batch the last write of a key wins.
    let mut batch = sled::Batch::default();
    for k in removed {
        batch.remove(k);
    }
    for k in inserted {
        batch.insert(k, Vec::new());
    }
    db.apply_batch(batch)?;
    Ok((progress, next))
}

const METADATA_OBJECT: &[u8] = b"\"metadata\":{";

/// Format 1's hash of a metadata pair (the key, a 0, the value's JSON text
/// with object keys sorted), kept only to find the keys the upgrade replaces.
fn format1_meta_hash(key: &str, value: &Value) -> [u8; 8] {
    let mut text = Vec::with_capacity(key.len() + 16);
    text.extend_from_slice(key.as_bytes());
    text.push(0);
    format1_text(value, &mut text);
    hash_prefix(&text)
}

fn format1_text(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for k in keys {
                out.extend_from_slice(serde_json::to_string(k).unwrap_or_default().as_bytes());
                out.push(b':');
                format1_text(&m[k], out);
                out.push(b',');
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for x in a {
                format1_text(x, out);
                out.push(b',');
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::super::{Durability, SledStore, index_keys};
    use super::*;
    use crate::store::manifest::{Manifest, sled_sequence, sled_store_id};
    use crate::store::{Expect, Kind, ListQuery, Op, Record, Store};

    /// sled lets go of its file lock a moment after its last handle drops
    /// (its flusher thread ends on its own): opening again waits for that.
    fn when_released<T, E: std::fmt::Display>(mut open: impl FnMut() -> Result<T, E>) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match open() {
                Ok(v) => return v,
                Err(e)
                    if std::time::Instant::now() < deadline
                        && (e.to_string().contains("lock") || e.to_string().contains("holds the store")) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(e) => panic!("cannot open the store: {e}"),
            }
        }
    }

    fn open_sled(dir: &Path) -> sled::Db {
        when_released(|| sled::Config::new().path(dir).open())
    }

    fn open_store(dir: &Path) -> SledStore {
        when_released(|| SledStore::open(dir, Durability::Flush))
    }

    /// Moves every metadata index key whose hash changed between format 1
    /// and 2 to the hash of `to` (the upgrade's own step, either way).
    fn rehash_all(db: &sled::Db, to: fn(&str, &Value) -> [u8; 8], from: fn(&str, &Value) -> [u8; 8]) {
        for kv in db.scan_prefix([ROW_TAG]) {
            let (key, raw) = kv.unwrap();
            let (r, tenant) = (decode(&raw).unwrap(), Uuid::from_slice(&key[2..18]).unwrap());
            for (name, value) in r.metadata.iter().flatten() {
                for s in SORTS {
                    db.remove(meta_key(&r, tenant, from(name, value), s)).unwrap();
                    db.insert(meta_key(&r, tenant, to(name, value), s), Vec::new()).unwrap();
                }
            }
        }
    }

    /// A store whose docs hold numbers spelled both ways, with its metadata
    /// index as release 0.1.0 wrote it (format 1): answers (tenant, owner).
    async fn a_format_1_store(dir: &Path) -> (Uuid, Uuid) {
        let (tenant, owner) = (Uuid::now_v7(), Uuid::now_v7());
        let store = open_store(dir);
        for meta in [
            json!({"n": 1.0}),
            json!({"n": 1, "lang": "en"}),
            json!({"n": 2.5, "v": [1.0, {"z": -0.0}]}),
            json!({"n": 1e3}),
        ] {
            let mut doc = Record::fresh(Kind::Doc, owner, json!({"title": "t"}));
            doc.metadata = meta.as_object().cloned();
            store.commit(tenant, vec![Op::Put { record: doc, expect: Expect::Absent }]).await.unwrap();
        }
        drop(store);
        let db = open_sled(dir);
        rehash_all(&db, format1_meta_hash, meta_hash);
        db.flush().unwrap();
        let (id, sequence) = (sled_store_id(&db).unwrap().unwrap(), sled_sequence(&db).unwrap().unwrap());
        drop(db);
        // Format 1, and the db changed after its clean stop, as a crash would leave it.
        Manifest { format_version: 1, ..running_manifest(id, sequence) }.write(dir).unwrap();
        (tenant, owner)
    }

    /// Whether the `m` keys are exactly those the records own now.
    fn metadata_index_is_exact(db: &sled::Db) -> bool {
        let mut want = BTreeSet::new();
        for kv in db.scan_prefix([ROW_TAG]) {
            let (key, raw) = kv.unwrap();
            let tenant = Uuid::from_slice(&key[2..18]).unwrap();
            want.extend(index_keys(&decode(&raw).unwrap(), tenant).into_iter().filter(|k| k[0] == b'm'));
        }
        let have: BTreeSet<Vec<u8>> = db.scan_prefix([b'm']).keys().map(|k| k.unwrap().to_vec()).collect();
        have == want
    }

    /// The manifest's format, and the format an upgrade under way started from.
    fn manifest_format(dir: &Path) -> (u32, Option<u32>) {
        let m = Manifest::read(dir).unwrap().unwrap();
        (m.format_version, m.upgrading_from)
    }

    async fn count_matching(store: &SledStore, tenant: Uuid, owner: Uuid, filter: Value) -> usize {
        let q = ListQuery { limit: 100, metadata_filter: filter.as_object().cloned(), ..Default::default() };
        store.list(tenant, Kind::Doc, owner, &q).await.unwrap().len()
    }

    #[tokio::test]
    async fn a_format_1_store_is_upgraded_at_open_and_lists_numbers_by_value() {
        let dir = tempfile::tempdir().unwrap();
        let (tenant, owner) = a_format_1_store(dir.path()).await;
        assert!(!metadata_index_is_exact(&open_sled(dir.path())), "format 1 keys differ for integral floats");
        let store = open_store(dir.path());
        for (filter, found) in [
            (json!({"n": 1}), 2),
            (json!({"n": 1.0}), 2),
            (json!({"n": 1, "lang": "en"}), 1),
            (json!({"n": 1000}), 1),
            (json!({"n": 2.5}), 1),
            (json!({"v": [1, {"z": 0}]}), 1),
            (json!({"n": 3}), 0),
        ] {
            assert_eq!(count_matching(&store, tenant, owner, filter.clone()).await, found, "{filter}");
        }
        assert_eq!(manifest_format(dir.path()), (FORMAT_VERSION, None));
        assert!(metadata_index_is_exact(&store.shared.db().unwrap()));
    }

    #[tokio::test]
    async fn an_upgrade_cut_short_runs_again_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let (tenant, owner) = a_format_1_store(dir.path()).await;
        {
            // The open records the upgrade as under way (as `open_checked` does),
            // one small batch is applied, then the process dies.
            let m = Manifest::read(dir.path()).unwrap().unwrap();
            Manifest { format_version: FORMAT_VERSION, upgrading_from: Some(1), ..m }
                .write(dir.path())
                .unwrap();
            let db = open_sled(dir.path());
            let (progress, next) = rehash_batch(&db, &[ROW_TAG], 1).unwrap();
            assert!(progress.moved > 0 && next.is_some(), "{progress:?}");
            assert!(!metadata_index_is_exact(&db), "half upgraded");
        }
        let store = open_store(dir.path());
        assert_eq!(count_matching(&store, tenant, owner, json!({"n": 1})).await, 2);
        assert_eq!(manifest_format(dir.path()), (FORMAT_VERSION, None));
        assert!(
            metadata_index_is_exact(&store.shared.db().unwrap()),
            "no key of format 1 is left, none is missing"
        );
    }

    #[tokio::test]
    async fn a_new_store_is_created_in_the_current_format() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        assert_eq!(store.opened().format_version, FORMAT_VERSION);
        assert_eq!(manifest_format(dir.path()), (FORMAT_VERSION, None));
    }
}
