//! The store's identity and checkpoint, kept beside sled in `manifest.json`.
//!
//! sled alone cannot tell a store that lost data from a small one: a `db` file
//! that is deleted, emptied or cut short opens as an empty or shorter store.
//! So the data dir carries, outside sled, what it must hold at least:
//!
//! - the store id (also written inside sled: a `db` from another store is refused);
//! - the format version of this layout;
//! - a checkpoint: a commit sequence that sled had made durable. sled keeps the
//!   same sequence under a reserved key ([`SEQUENCE_KEY`]), bumped after every
//!   group the writer flushes; a store whose sequence is behind the checkpoint
//!   lost data;
//! - whether the last stop was clean, and then the size and SHA-256 of the
//!   `db` file as sled left it: a file changed since a clean stop is refused
//!   before sled opens it (sled's recovery rewrites the tail of a damaged log,
//!   which would destroy what a restore or an expert could still use).
//!
//! The checkpoint never gets ahead of what sled made durable: the writer
//! publishes a sequence only after the flush that carried it, and a background
//! thread writes it to the manifest at most once a second (the writer never
//! waits for the manifest). The manifest is always replaced atomically: a temp
//! file, fsync, rename, fsync of the directory.
//!
//! Beside it, `checkpoint` ([`DurablePoint`]) keeps the size of the `db` file
//! and the durable sequence as of the last durable group that grew the file:
//! the writer overwrites it in place (one `pwrite`, no fsync) after such a
//! group and before answering any of its commits, and again at a clean close
//! (see [`PointFile::record`]). A killed
//! process's writes are in the page cache, so after a kill it holds the size
//! under which every acknowledged write lies; sled never shrinks the file (see
//! `server/vendor/sled/PATCHED.md`), so a `db` file shorter than that lost
//! acknowledged data, whatever sled's recovery would make of what is left.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The manifest's file name in the data dir.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The file of the last durable point ([`DurablePoint`]) in the data dir.
pub const POINT_FILE: &str = "checkpoint";
/// The layout the manifest describes; a newer one is refused by older binaries.
///
/// - 1: release 0.1.0 and before.
/// - 2: metadata index keys hash numbers by value (`1.0` like `1`); a store of
///   format 1 is upgraded at open (see [`super::sled_store`]'s `upgrade`).
pub const FORMAT_VERSION: u32 = 2;
/// sled's data file in the data dir.
pub const DB_FILE: &str = "db";

/// Reserved keys in sled's default tree. Record keys start with a tag byte
/// (`r`, `o`, `m`, `f`, `u`; see [`super::sled_store`]), never with 0.
pub const STORE_ID_KEY: &[u8] = b"\0agent-platform/store-id";
pub const SEQUENCE_KEY: &[u8] = b"\0agent-platform/commit-sequence";

/// How often the background thread brings the manifest's checkpoint up to date.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// A `db` file larger than this gets no checksum at a clean stop (only its size):
/// hashing it would slow every stop and start.
const CHECKSUM_MAX_BYTES: u64 = 1 << 30;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub store_id: Uuid,
    pub format_version: u32,
    /// A commit sequence sled had made durable: the store holds at least this.
    pub checkpoint: u64,
    /// Written by a clean stop, after sled closed its files; false while running.
    pub clean_stop: bool,
    /// The `db` file as the clean stop left it (absent unless `clean_stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_file: Option<FileFingerprint>,
    /// The format an upgrade to `format_version` started from, while it runs:
    /// a start that finds it runs the upgrade again (an older binary, seeing
    /// `format_version`, already refuses the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrading_from: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFingerprint {
    pub bytes: u64,
    /// Hex SHA-256 of the content; absent for files over [`CHECKSUM_MAX_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl Manifest {
    /// Reads the manifest of `dir`: `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, String> {
        let path = dir.join(MANIFEST_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let m: Manifest = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a valid manifest: {e}", path.display()))?;
        if m.format_version > FORMAT_VERSION {
            return Err(format!(
                "{} has format version {}, newer than this binary knows ({FORMAT_VERSION}): \
                 run the newer agent-platform that wrote it",
                path.display(),
                m.format_version
            ));
        }
        Ok(Some(m))
    }

    /// Replaces the manifest of `dir` atomically and durably.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
        let mut text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        text.push(b'\n');
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(MANIFEST_FILE))?;
        File::open(dir)?.sync_all()
    }
}

impl FileFingerprint {
    /// The size, and the checksum when the file is small enough to hash.
    pub fn of(path: &Path) -> std::io::Result<FileFingerprint> {
        let bytes = std::fs::metadata(path)?.len();
        let sha256 = if bytes <= CHECKSUM_MAX_BYTES {
            let mut f = File::open(path)?;
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
            Some(hex::encode(h.finalize()))
        } else {
            None
        };
        Ok(FileFingerprint { bytes, sha256 })
    }

    /// How `now` differs from `self` (the file at the clean stop), if it does.
    pub fn difference(&self, now: &FileFingerprint) -> Option<String> {
        if now.bytes != self.bytes {
            return Some(format!(
                "its db file is {} bytes, but was {} at the last clean stop",
                now.bytes, self.bytes
            ));
        }
        match (&self.sha256, &now.sha256) {
            (Some(a), Some(b)) if a != b => {
                Some("its db file's content changed after the last clean stop (its checksum differs)".into())
            }
            _ => None,
        }
    }
}

/// How often, at most, the writer writes the sequence into sled. Writing it
/// with every group made each group's flush carry one more page: ~15% of the
/// single-client write rate. A checkpoint trails by a second anyway, and a
/// clean stop writes the exact count.
const STAGE_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// What the writer last made durable: the `db` file's size right after the
/// flush (every acknowledged write lies below it) and the durable sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurablePoint {
    pub store_id: Uuid,
    pub commits: u64,
    pub db_bytes: u64,
}

const POINT_MAGIC: &[u8; 8] = b"apckpt\x00\x01";
const POINT_LEN: usize = 48;

impl DurablePoint {
    /// Magic, store id, commits, db bytes, then the first 8 bytes of the
    /// SHA-256 of those: 48 bytes, within one disk sector.
    fn encode(&self) -> [u8; POINT_LEN] {
        let mut out = [0u8; POINT_LEN];
        out[..8].copy_from_slice(POINT_MAGIC);
        out[8..24].copy_from_slice(self.store_id.as_bytes());
        out[24..32].copy_from_slice(&self.commits.to_be_bytes());
        out[32..40].copy_from_slice(&self.db_bytes.to_be_bytes());
        let sum = Sha256::digest(&out[..40]);
        out[40..].copy_from_slice(&sum[..8]);
        out
    }

    fn decode(bytes: &[u8]) -> Option<DurablePoint> {
        let bytes: &[u8; POINT_LEN] = bytes.try_into().ok()?;
        let word = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        (&bytes[..8] == POINT_MAGIC && Sha256::digest(&bytes[..40])[..8] == bytes[40..]).then(|| {
            DurablePoint {
                store_id: Uuid::from_slice(&bytes[8..24]).expect("16 bytes"),
                commits: word(24),
                db_bytes: word(32),
            }
        })
    }

    /// Reads the point of `dir`: `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<DurablePoint>, String> {
        let path = dir.join(POINT_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => DurablePoint::decode(&bytes).map(Some).ok_or_else(|| {
                format!("{} is damaged ({} bytes that do not check)", path.display(), bytes.len())
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }
}

/// The writer's handle on [`POINT_FILE`] and on the `db` file whose size it records.
#[derive(Debug)]
pub struct PointFile {
    file: File,
    db: File,
    store_id: Uuid,
    /// The `db` size the file holds now: [`PointFile::record`] writes only past it.
    recorded_bytes: AtomicU64,
}

impl PointFile {
    /// Writes the point of a store just opened (`commits` durable, the `db`
    /// file as it is) durably, and opens the file for [`PointFile::record`].
    pub fn create(dir: &Path, store_id: Uuid, commits: u64) -> std::io::Result<PointFile> {
        let db = File::open(dir.join(DB_FILE))?;
        let point = DurablePoint { store_id, commits, db_bytes: db.metadata()?.len() };
        let tmp = dir.join(format!("{POINT_FILE}.tmp"));
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&point.encode())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(POINT_FILE))?;
        File::open(dir)?.sync_all()?;
        let file = std::fs::OpenOptions::new().write(true).open(dir.join(POINT_FILE))?;
        Ok(PointFile { file, db, store_id, recorded_bytes: AtomicU64::new(point.db_bytes) })
    }

    /// Records `commits` and the `db` file's size now, in place, without
    /// fsync, when the file grew since the last record (or `always`): every
    /// acknowledged write lies below the size recorded, which is what a cut
    /// file is checked against; the commit count trails it between growths
    /// (the manifest's checkpoint keeps up with it once a second). Call right
    /// after a flush succeeded and before anyone hears of it.
    ///
    /// Both costs are kept off a sequential writer (`--bench executions`):
    /// - the point is written only when the file grew: each write changes the
    ///   point file's mtime, which the next fsync commits;
    /// - the size is read with `lseek(SEEK_END)`, not `fstat`: a `stat` that
    ///   reads a file's times makes Linux (6.13+, multigrain timestamps) give
    ///   the file's next write a fine-grained time, so an `fstat` per group
    ///   would make each of sled's writes dirty the `db` inode, rather than
    ///   the first write of each clock tick.
    pub fn record(&self, commits: u64, always: bool) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::FileExt;
        // This handle is ours alone (sled writes through its own), so moving its offset is harmless.
        let db_bytes = (&self.db).seek(SeekFrom::End(0))?;
        if !always && db_bytes <= self.recorded_bytes.load(Ordering::Relaxed) {
            return Ok(());
        }
        let point = DurablePoint { store_id: self.store_id, commits, db_bytes };
        self.file.write_all_at(&point.encode(), 0)?;
        self.recorded_bytes.fetch_max(db_bytes, Ordering::Relaxed);
        Ok(())
    }
}

/// The commit sequence, shared by the writer, the checkpoint thread and the clean stop.
#[derive(Debug)]
pub struct Sequence {
    /// Commits applied by flushed groups (in memory: sled has `staged`).
    count: AtomicU64,
    /// The latest value written to sled (durable at the next flush).
    staged: AtomicU64,
    /// The latest value known durable: what a checkpoint may record.
    durable: AtomicU64,
    /// When `staged` was last written, in ms since `epoch` (`u64::MAX`: never).
    staged_at_ms: AtomicU64,
    epoch: std::time::Instant,
}

impl Sequence {
    pub fn starting_at(seq: u64) -> Arc<Sequence> {
        Arc::new(Sequence {
            count: AtomicU64::new(seq),
            staged: AtomicU64::new(seq),
            durable: AtomicU64::new(seq),
            staged_at_ms: AtomicU64::new(u64::MAX),
            epoch: std::time::Instant::now(),
        })
    }

    /// Called by the writer after a group's flush succeeded, with the number of
    /// commits the group applied. The value staged before that flush is now
    /// durable; the new count is written to sled at most every [`STAGE_EVERY`]
    /// and rides on the next flush (or sled's background flush, or the close),
    /// so the sequence costs no flush of its own.
    pub fn group_flushed(&self, db: &sled::Db, applied: usize) {
        self.durable.store(self.staged.load(Ordering::Relaxed), Ordering::Release);
        if applied == 0 {
            return;
        }
        self.count.fetch_add(applied as u64, Ordering::Relaxed);
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.staged_at_ms.load(Ordering::Relaxed);
        if last == u64::MAX || now.saturating_sub(last) >= STAGE_EVERY.as_millis() as u64 {
            self.stage(db);
        }
    }

    /// Writes the current count into sled (durable at the next flush).
    pub fn stage(&self, db: &sled::Db) {
        let count = self.count.load(Ordering::Relaxed);
        // A failed insert only leaves the sequence behind: a checkpoint never passes it.
        if db.insert(SEQUENCE_KEY, &count.to_be_bytes()).is_ok() {
            self.staged.store(count, Ordering::Relaxed);
            self.staged_at_ms.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// After [`Sequence::stage`] and a successful flush with the writer stopped:
    /// everything staged is durable.
    pub fn all_flushed(&self) {
        self.durable.store(self.staged.load(Ordering::Relaxed), Ordering::Release);
    }

    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }
}

/// Reads the sequence sled holds, if any (a malformed one reads as 0: behind any checkpoint).
pub fn sled_sequence(db: &sled::Db) -> sled::Result<Option<u64>> {
    Ok(db.get(SEQUENCE_KEY)?.map(|v| <[u8; 8]>::try_from(v.as_ref()).map_or(0, u64::from_be_bytes)))
}

/// Reads the store id sled holds, if any.
pub fn sled_store_id(db: &sled::Db) -> sled::Result<Option<Uuid>> {
    Ok(db.get(STORE_ID_KEY)?.and_then(|v| Uuid::from_slice(&v).ok()))
}

/// Keeps the manifest's checkpoint near the durable sequence, from its own
/// thread, and writes the final manifest when the store closes.
pub struct Checkpointer {
    dir: PathBuf,
    store_id: Uuid,
    sequence: Arc<Sequence>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread; `written` is the checkpoint the manifest holds now.
    pub fn start(dir: &Path, store_id: Uuid, sequence: Arc<Sequence>, written: u64) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (thread_dir, thread_seq) = (dir.to_path_buf(), sequence.clone());
        let thread = std::thread::Builder::new().name("store-checkpoint".into()).spawn(move || {
            let mut written = written;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY) {
                let durable = thread_seq.durable();
                if durable > written {
                    let m = running_manifest(store_id, durable);
                    // A failed write (e.g. a full disk) leaves the checkpoint behind,
                    // which is safe; the next tick tries again.
                    if m.write(&thread_dir).is_ok() {
                        written = durable;
                    }
                }
            }
        })?;
        Ok(Checkpointer {
            dir: dir.to_path_buf(),
            store_id,
            sequence,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the thread (idempotent).
    pub fn stop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Writes the clean-stop manifest. Call only once sled has closed its files
    /// (the `db` must not change after its fingerprint is taken) and only when
    /// the final flush succeeded.
    pub fn write_clean_stop(&mut self) -> std::io::Result<()> {
        self.stop();
        let db_file = FileFingerprint::of(&self.dir.join(DB_FILE))?;
        Manifest {
            store_id: self.store_id,
            format_version: FORMAT_VERSION,
            checkpoint: self.sequence.durable(),
            clean_stop: true,
            db_file: Some(db_file),
            upgrading_from: None,
        }
        .write(&self.dir)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The manifest of a running store: its checkpoint, and no clean stop.
pub fn running_manifest(store_id: Uuid, checkpoint: u64) -> Manifest {
    Manifest {
        store_id,
        format_version: FORMAT_VERSION,
        checkpoint,
        clean_stop: false,
        db_file: None,
        upgrading_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_durable_sequence_trails_what_sled_was_given_until_the_next_flush() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let seq = Sequence::starting_at(10);
        seq.group_flushed(&db, 3);
        assert_eq!((seq.durable(), sled_sequence(&db).unwrap()), (10, Some(13)));
        seq.group_flushed(&db, 0);
        assert_eq!((seq.durable(), sled_sequence(&db).unwrap()), (13, Some(13)));
        seq.group_flushed(&db, 2);
        assert_eq!(sled_sequence(&db).unwrap(), Some(13), "staged at most every STAGE_EVERY");
        seq.stage(&db);
        seq.all_flushed();
        assert_eq!((seq.durable(), sled_sequence(&db).unwrap()), (15, Some(15)));
    }

    #[test]
    fn a_durable_point_is_recorded_in_place_and_a_damaged_one_is_told() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(DurablePoint::read(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join(DB_FILE), vec![7u8; 1000]).unwrap();
        let id = Uuid::now_v7();
        let file = PointFile::create(dir.path(), id, 5).unwrap();
        let read = || DurablePoint::read(dir.path()).unwrap().unwrap();
        assert_eq!(read(), DurablePoint { store_id: id, commits: 5, db_bytes: 1000 });
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(DB_FILE))
            .unwrap()
            .write_all(&[1; 24])
            .unwrap();
        file.record(9, false).unwrap();
        assert_eq!(read(), DurablePoint { store_id: id, commits: 9, db_bytes: 1024 });
        // The same size again: nothing written, unless asked (a clean close).
        file.record(11, false).unwrap();
        assert_eq!(read().commits, 9);
        file.record(11, true).unwrap();
        assert_eq!(read(), DurablePoint { store_id: id, commits: 11, db_bytes: 1024 });
        let mut bytes = std::fs::read(dir.path().join(POINT_FILE)).unwrap();
        bytes[30] ^= 1;
        std::fs::write(dir.path().join(POINT_FILE), &bytes).unwrap();
        let err = DurablePoint::read(dir.path()).unwrap_err();
        assert!(err.contains("is damaged (48 bytes that do not check)"), "{err}");
    }

    #[test]
    fn a_manifest_is_replaced_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), None);
        let m = running_manifest(Uuid::now_v7(), 42);
        m.write(dir.path()).unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), Some(m.clone()));
        let newer = Manifest { format_version: FORMAT_VERSION + 1, ..m };
        newer.write(dir.path()).unwrap();
        let err = Manifest::read(dir.path()).unwrap_err();
        assert!(err.contains("newer than this binary knows"), "{err}");
        assert!(!dir.path().join(format!("{MANIFEST_FILE}.tmp")).exists());
    }
}
